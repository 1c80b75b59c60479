#include "common/base/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

class RealEnv final : public Env {
 public:
  absl::Time Now() override { return absl::Now(); }
  void SleepFor(absl::Duration duration) override {
    if (duration > absl::ZeroDuration()) absl::SleepFor(duration);
  }
};

// A file descriptor open for writing. Externally synchronized.
class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd)
      : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    while (!data.empty()) {
      const ssize_t n = write(fd_, data.data(), data.size());
      if (n < 0) {
        if (errno == EINTR) continue;
        return FileError("cannot write", path_, errno);
      }
      data.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (fsync(fd_) != 0) return FileError("cannot fsync", path_, errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    const int rc = close(fd_);
    fd_ = -1;
    if (rc != 0) return FileError("cannot close", path_, errno);
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  int fd_;  // -1 once closed.
};

}  // namespace

absl::Status FileError(absl::string_view what, absl::string_view path,
                       int error_number) {
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(error_number));
  switch (error_number) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::UnavailableError(message);
  }
}

Env* Env::Default() {
  static Env* const env = new RealEnv();
  return env;
}

absl::StatusOr<std::unique_ptr<WritableFile>> Env::NewWritableFile(
    const std::string& path) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return FileError("cannot create", path, errno);
  return std::make_unique<PosixWritableFile>(path, fd);
}

absl::StatusOr<std::string> Env::ReadFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return FileError("cannot open", path, errno);
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status error = FileError("cannot read", path, errno);
      close(fd);
      return error;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

absl::Status Env::RenameFile(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) == 0) return absl::OkStatus();
  return FileError("cannot rename", absl::StrCat(from, " to ", to), errno);
}

absl::Status Env::RemoveFile(const std::string& path) {
  if (unlink(path.c_str()) == 0) return absl::OkStatus();
  return FileError("cannot remove", path, errno);
}

absl::Status Env::SyncDir(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return FileError("cannot open", dir, errno);
  const int rc = fsync(fd);
  const int error = errno;
  close(fd);
  if (rc != 0) return FileError("cannot fsync", dir, error);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Env::GetChildren(
    const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return FileError("cannot list", dir, errno);
  std::vector<std::string> names;
  while (const dirent* e = readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(d);
  return names;
}

absl::Status Env::CreateDirs(const std::string& dir) {
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      const std::string path = dir.substr(0, i);
      if (!path.empty() && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return FileError("cannot create", path, errno);
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<FileInfo> Env::Stat(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    return FileError("cannot stat", path, errno);
  FileInfo info;
  info.is_directory = S_ISDIR(st.st_mode);
  info.writable =
      access(path.c_str(), info.is_directory ? W_OK | X_OK : W_OK) == 0;
  info.size = static_cast<int64_t>(st.st_size);
  info.modified = absl::TimeFromTimespec(st.st_mtim);
  return info;
}

std::string DirName(absl::string_view path) {
  const size_t slash = path.rfind('/');
  if (slash == absl::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents, Env* env) {
  // A name no other writer of `path` uses, in this process or another
  // (lockstep_launch's workers given one --dump_weights write at once).
  static std::atomic<uint64_t> writes{0};
  const std::string tmp =
      absl::StrCat(path, ".", getpid(), "-", writes.fetch_add(1), ".tmp");
  absl::Status status;
  if (absl::StatusOr<std::unique_ptr<WritableFile>> file =
          env->NewWritableFile(tmp);
      !file.ok()) {
    status = file.status();
  } else {
    status = (*file)->Append(contents);
    if (status.ok()) status = (*file)->Sync();
    if (absl::Status closed = (*file)->Close(); status.ok()) status = closed;
    if (status.ok()) status = env->RenameFile(tmp, path);
    if (!status.ok()) env->RemoveFile(tmp).IgnoreError();
  }
  // After the rename `path` is whole; the folder's fsync makes the new name
  // survive a crash (the old file could otherwise come back).
  if (status.ok()) status = env->SyncDir(DirName(path));
  if (status.ok()) return status;
  return absl::UnavailableError(
      absl::StrCat("cannot write ", path, ": ", status.message()));
}

absl::Status CheckCanWriteFile(absl::string_view label, const std::string& path,
                               Env* env) {
  const auto refuse = [&](absl::string_view why) {
    return absl::FailedPreconditionError(
        absl::StrCat(label, ": cannot write ", path, ": ", why));
  };
  if (path.empty()) return refuse("the path is empty");
  const std::string dir = DirName(path);
  const absl::StatusOr<FileInfo> folder = env->Stat(dir);
  if (absl::IsNotFound(folder.status())) {
    return refuse(absl::StrCat("the folder ", dir, " does not exist"));
  }
  if (!folder.ok()) return refuse(folder.status().message());
  if (!folder->is_directory) {
    return refuse(absl::StrCat(dir, " is not a directory"));
  }
  if (!folder->writable) {
    return refuse(absl::StrCat("the folder ", dir, " is not writable"));
  }
  // Missing is what a first run finds; an existing file is replaced.
  const absl::StatusOr<FileInfo> file = env->Stat(path);
  if (file.ok() && file->is_directory) return refuse("it is a directory");
  const std::string probe = absl::StrCat(path, ".probe-", getpid());
  absl::StatusOr<std::unique_ptr<WritableFile>> created =
      env->NewWritableFile(probe);
  if (!created.ok()) {
    return refuse(absl::StrCat("no file can be created in ", dir, " (",
                               created.status().message(), ")"));
  }
  (*created)->Close().IgnoreError();
  if (absl::Status removed = env->RemoveFile(probe); !removed.ok()) {
    return refuse(removed.message());
  }
  return absl::OkStatus();
}

absl::Time FakeEnv::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void FakeEnv::SleepFor(absl::Duration duration) {
  if (duration <= absl::ZeroDuration()) return;
  absl::MutexLock lock(&mu_);
  now_ += duration;
  slept_ += duration;
}

void FakeEnv::Advance(absl::Duration duration) {
  absl::MutexLock lock(&mu_);
  now_ += duration;
}

absl::Duration FakeEnv::slept() {
  absl::MutexLock lock(&mu_);
  return slept_;
}

}  // namespace lockstep
