#include "common/testing/fault_injection_env.h"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace lockstep {

// A file of the base Env whose appends and syncs pass the faults first.
// Externally synchronized, as every WritableFile.
class FaultInjectionEnv::File final : public WritableFile {
 public:
  File(FaultInjectionEnv* env, std::string path,
       std::unique_ptr<WritableFile> base)
      : env_(env), path_(std::move(path)), base_(std::move(base)) {}

  absl::Status Append(absl::string_view data) override {
    int error = 0;
    const int64_t n =
        env_->Admit(path_, static_cast<int64_t>(data.size()), &error);
    RETURN_IF_ERROR(base_->Append(data.substr(0, static_cast<size_t>(n))));
    if (error != 0) return FileError("cannot write", path_, error);
    return absl::OkStatus();
  }
  absl::Status Sync() override { return env_->SyncFile(path_, base_.get()); }
  absl::Status Close() override { return base_->Close(); }

 private:
  FaultInjectionEnv* const env_;  // Not owned.
  const std::string path_;
  const std::unique_ptr<WritableFile> base_;
};

void FaultInjectionEnv::TearWritesAfter(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  tear_after_ = bytes;
}

void FaultInjectionEnv::FillDiskAfter(int64_t bytes) {
  absl::MutexLock lock(&mu_);
  space_left_ = bytes;
}

void FaultInjectionEnv::FailFileSyncs() {
  absl::MutexLock lock(&mu_);
  fail_file_syncs_ = true;
}

void FaultInjectionEnv::LoseFileSyncs() {
  absl::MutexLock lock(&mu_);
  lose_file_syncs_ = true;
}

void FaultInjectionEnv::FailDirSyncs() {
  absl::MutexLock lock(&mu_);
  fail_dir_syncs_ = true;
}

void FaultInjectionEnv::FailRenames() {
  absl::MutexLock lock(&mu_);
  fail_renames_ = true;
}

void FaultInjectionEnv::FailReads() {
  absl::MutexLock lock(&mu_);
  fail_reads_ = true;
}

void FaultInjectionEnv::Heal() {
  absl::MutexLock lock(&mu_);
  tear_after_ = -1;
  space_left_ = -1;
  fail_file_syncs_ = lose_file_syncs_ = fail_dir_syncs_ = false;
  fail_renames_ = fail_reads_ = false;
}

int64_t FaultInjectionEnv::faults_injected() {
  absl::MutexLock lock(&mu_);
  return faults_injected_;
}

int64_t FaultInjectionEnv::Admit(const std::string& path, int64_t n,
                                 int* error) {
  absl::MutexLock lock(&mu_);
  Written& file = written_[path];
  if (tear_after_ >= 0 && file.size + n > tear_after_) {
    n = std::max<int64_t>(0, tear_after_ - file.size);
    *error = EIO;
  }
  if (space_left_ >= 0) {
    if (n > space_left_) {
      n = space_left_;
      *error = ENOSPC;
    }
    space_left_ -= n;
  }
  if (*error != 0) ++faults_injected_;
  file.size += n;
  return n;
}

absl::Status FaultInjectionEnv::SyncFile(const std::string& path,
                                         WritableFile* file) {
  {
    absl::MutexLock lock(&mu_);
    if (fail_file_syncs_) {
      ++faults_injected_;
      return FileError("cannot fsync", path, EIO);
    }
  }
  RETURN_IF_ERROR(file->Sync());
  absl::MutexLock lock(&mu_);
  if (lose_file_syncs_) {
    ++faults_injected_;
  } else if (auto it = written_.find(path); it != written_.end()) {
    it->second.synced = it->second.size;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WritableFile>>
FaultInjectionEnv::NewWritableFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   base_->NewWritableFile(path));
  absl::MutexLock lock(&mu_);
  written_[path] = Written();
  return std::unique_ptr<WritableFile>(new File(this, path, std::move(file)));
}

absl::StatusOr<std::string> FaultInjectionEnv::ReadFile(
    const std::string& path) {
  {
    absl::MutexLock lock(&mu_);
    if (fail_reads_) {
      ++faults_injected_;
      return FileError("cannot read", path, EIO);
    }
  }
  return base_->ReadFile(path);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from,
                                           const std::string& to) {
  absl::MutexLock lock(&mu_);
  if (fail_renames_) {
    ++faults_injected_;
    return FileError("cannot rename", absl::StrCat(from, " to ", to), EIO);
  }
  // What a crash would bring back under `to`: its durable part.
  PendingRename pending{from, to, std::nullopt};
  if (absl::StatusOr<std::string> old = base_->ReadFile(to); old.ok()) {
    if (auto it = written_.find(to); it != written_.end()) {
      old->resize(static_cast<size_t>(it->second.synced));
    }
    pending.replaced = *std::move(old);
  }
  RETURN_IF_ERROR(base_->RenameFile(from, to));
  written_.erase(to);
  if (auto it = written_.find(from); it != written_.end()) {
    written_[to] = it->second;
    written_.erase(from);
  }
  pending_renames_.push_back(std::move(pending));
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  RETURN_IF_ERROR(base_->RemoveFile(path));
  absl::MutexLock lock(&mu_);
  written_.erase(path);
  return absl::OkStatus();
}

absl::Status FaultInjectionEnv::SyncDir(const std::string& dir) {
  absl::MutexLock lock(&mu_);
  if (fail_dir_syncs_) {
    ++faults_injected_;
    return FileError("cannot fsync", dir, EIO);
  }
  RETURN_IF_ERROR(base_->SyncDir(dir));
  pending_renames_.erase(
      std::remove_if(
          pending_renames_.begin(), pending_renames_.end(),
          [&](const PendingRename& r) { return DirName(r.to) == dir; }),
      pending_renames_.end());
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> FaultInjectionEnv::GetChildren(
    const std::string& dir) {
  return base_->GetChildren(dir);
}

absl::Status FaultInjectionEnv::CreateDirs(const std::string& dir) {
  return base_->CreateDirs(dir);
}

absl::StatusOr<FileInfo> FaultInjectionEnv::Stat(const std::string& path) {
  return base_->Stat(path);
}

absl::Status FaultInjectionEnv::Restore(const std::string& path,
                                        const std::string& bytes) {
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   base_->NewWritableFile(path));
  RETURN_IF_ERROR(file->Append(bytes));
  RETURN_IF_ERROR(file->Sync());
  return file->Close();
}

absl::Status FaultInjectionEnv::SimulateCrash() {
  absl::MutexLock lock(&mu_);
  for (auto r = pending_renames_.rbegin(); r != pending_renames_.rend(); ++r) {
    RETURN_IF_ERROR(base_->RenameFile(r->to, r->from));
    if (auto it = written_.find(r->to); it != written_.end()) {
      written_[r->from] = it->second;
      written_.erase(it);
    }
    if (r->replaced.has_value()) RETURN_IF_ERROR(Restore(r->to, *r->replaced));
  }
  pending_renames_.clear();
  for (auto& [path, file] : written_) {
    if (file.synced == file.size) continue;
    // A file removed since, by the code under test, stays removed.
    absl::StatusOr<std::string> bytes = base_->ReadFile(path);
    if (!bytes.ok()) continue;
    bytes->resize(static_cast<size_t>(file.synced));
    RETURN_IF_ERROR(Restore(path, *bytes));
    file.size = file.synced;
  }
  return absl::OkStatus();
}

}  // namespace lockstep
