// CheckpointStore (declared in checkpoint.h): the folder of one shard's
// checkpoints, written atomically and pruned, loaded newest first with the
// damaged ones set aside. checkpoint.cc holds the file format.
#include <algorithm>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "server/core/checkpoint.h"

namespace lockstep {
namespace {

constexpr char kSuffix[] = ".lsc";
// A temporary checkpoint file nobody has written for this long is a
// leftover of a writer that died.
constexpr absl::Duration kStaleTmpAge = absl::Minutes(10);

// The store's file errors are UNAVAILABLE whatever the cause (the message
// names it): a checkpoint the disk refused may be written later.
absl::Status Unavailable(const absl::Status& status) {
  return absl::UnavailableError(status.message());
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Create(
    const std::string& dir, int shard, int num_shards, int keep, Env* env) {
  if (keep < 1) {
    return absl::InvalidArgumentError("must keep at least one checkpoint");
  }
  const std::string shard_dir =
      absl::StrCat(dir, "/shard-", shard, "-of-", num_shards);
  if (absl::Status made = env->CreateDirs(shard_dir); !made.ok()) {
    return Unavailable(made);
  }
  // Found now, not at the first save: a file in the way, or a folder this
  // user cannot write.
  const absl::StatusOr<FileInfo> info = env->Stat(shard_dir);
  if (!info.ok() || !info->is_directory || !info->writable) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint folder ", shard_dir, " is not a writable directory"));
  }
  return std::unique_ptr<CheckpointStore>(
      new CheckpointStore(shard_dir, keep, env));
}

std::vector<std::string> CheckpointStore::Files(
    absl::string_view suffix) const {
  std::vector<std::string> names;
  // A folder that cannot be listed holds no checkpoint this store can use.
  if (absl::StatusOr<std::vector<std::string>> children =
          env_->GetChildren(dir_);
      children.ok()) {
    for (std::string& name : *children) {
      if (absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, suffix)) {
        names.push_back(std::move(name));
      }
    }
  }
  // Zero-padded versions sort by name.
  std::sort(names.begin(), names.end());
  for (std::string& name : names) name = absl::StrCat(dir_, "/", name);
  return names;
}

std::vector<std::string> CheckpointStore::List() const {
  return Files(kSuffix);
}

std::string CheckpointStore::PathOf(int64_t version) const {
  return absl::StrFormat("%s/ckpt-%012d%s", dir_, version, kSuffix);
}

std::vector<int64_t> CheckpointStore::Versions() const {
  std::vector<int64_t> versions;
  const size_t prefix = dir_.size() + std::strlen("/ckpt-");
  for (const std::string& path : List()) {
    int64_t version = 0;
    const std::string digits =
        path.substr(prefix, path.size() - prefix - std::strlen(kSuffix));
    if (absl::SimpleAtoi(digits, &version) && version >= 0 &&
        PathOf(version) == path) {
      versions.push_back(version);
    }
  }
  return versions;
}

absl::StatusOr<ShardCheckpoint> CheckpointStore::Load(int64_t version) const {
  const std::string path = PathOf(version);
  absl::StatusOr<std::string> contents = env_->ReadFile(path);
  if (!contents.ok()) {
    const absl::StatusOr<FileInfo> info = env_->Stat(path);
    if (!info.ok()) {
      return absl::NotFoundError(
          absl::StrCat("no checkpoint of version ", version, " in ", dir_));
    }
    return Unavailable(contents.status());
  }
  absl::StatusOr<ShardCheckpoint> checkpoint = DecodeCheckpoint(*contents);
  if (!checkpoint.ok()) {
    return absl::Status(
        checkpoint.status().code(),
        absl::StrCat(path, ": ", checkpoint.status().message()));
  }
  if (checkpoint->version != version) {
    return absl::DataLossError(absl::StrCat(
        path, " holds version ", checkpoint->version, ", not ", version));
  }
  return checkpoint;
}

std::vector<std::string> CheckpointStore::SetAsideAfter(int64_t version) const {
  std::vector<std::string> aside;
  for (int64_t v : Versions()) {
    if (v <= version) continue;
    const std::string name = PathOf(v) + ".stepped-back";
    if (env_->RenameFile(PathOf(v), name).ok()) aside.push_back(name);
  }
  return aside;
}

absl::StatusOr<std::string> CheckpointStore::Save(
    const ShardCheckpoint& checkpoint) {
  const std::string path = PathOf(checkpoint.version);
  const std::string tmp = path + ".tmp";
  const std::string bytes = EncodeCheckpoint(checkpoint, env_->Now());
  absl::StatusOr<std::unique_ptr<WritableFile>> file =
      env_->NewWritableFile(tmp);
  if (!file.ok()) return Unavailable(file.status());
  absl::Status written = (*file)->Append(bytes);
  if (written.ok()) written = (*file)->Sync();
  if (absl::Status closed = (*file)->Close(); written.ok()) written = closed;
  // Only a whole, synced file is renamed into place: a torn or unsynced one
  // never carries a checkpoint's name.
  if (written.ok()) written = env_->RenameFile(tmp, path);
  if (!written.ok()) {
    env_->RemoveFile(tmp).IgnoreError();
    return Unavailable(written);
  }
  // Until the folder is synced a crash may lose the new name; the older
  // checkpoints are pruned only once it is durable.
  if (absl::Status synced = env_->SyncDir(dir_); !synced.ok()) {
    return Unavailable(synced);
  }
  std::vector<std::string> all = List();
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    if (all[i] != path) env_->RemoveFile(all[i]).IgnoreError();
  }
  return path;
}

absl::StatusOr<std::optional<ShardCheckpoint>> CheckpointStore::LoadNewest(
    std::vector<std::string>* notes) const {
  // A write that did not finish (the server died before its rename) left its
  // temporary file: never read, and never pruned by Save, it would stay for
  // good, one model's size per crash. Only files untouched for
  // kStaleTmpAge go: a predecessor still writing its last checkpoint on a
  // shared volume (a replacement pod started early) keeps its own.
  const absl::Time now = env_->Now();
  for (const std::string& path : Files(absl::StrCat(kSuffix, ".tmp"))) {
    const absl::StatusOr<FileInfo> info = env_->Stat(path);
    if (info.ok() && now - info->modified >= kStaleTmpAge &&
        env_->RemoveFile(path).ok()) {
      notes->push_back(
          absl::StrCat("removed ", path,
                       ", left by a checkpoint write that did not finish"));
    }
  }
  std::vector<std::string> all = List();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // A file that cannot be read (permissions, an I/O error) is not known
    // to be damaged: stop rather than set it aside and roll back.
    absl::StatusOr<std::string> contents = env_->ReadFile(*it);
    if (!contents.ok()) {
      return absl::UnavailableError(
          absl::StrCat(contents.status().message(),
                       " (not set aside: it may be intact; make it readable "
                       "or move it away)"));
    }
    absl::StatusOr<ShardCheckpoint> checkpoint = DecodeCheckpoint(*contents);
    if (checkpoint.ok()) return std::optional<ShardCheckpoint>(*checkpoint);
    // Set aside, out of the listing: it is kept for a look, never chosen
    // again, and never counted as one of the newest when Save prunes (which
    // could otherwise delete the good ones and keep it).
    const std::string aside = *it + ".corrupt";
    const bool moved = env_->RenameFile(*it, aside).ok();
    notes->push_back(absl::StrCat(
        *it, ": ", checkpoint.status().message(),
        moved ? absl::StrCat("; set aside as ", aside) : "",
        std::next(it) != all.rend() ? "; falling back to the previous one"
                                    : "; no earlier checkpoint is left"));
  }
  return std::optional<ShardCheckpoint>();
}

absl::StatusOr<ShardCheckpoint> CheckpointStore::ReadForInit(
    const std::string& path, int shard, int num_shards, Env* env) {
  std::string file = path;
  const absl::StatusOr<FileInfo> info = env->Stat(path);
  if (!info.ok()) return Unavailable(info.status());
  if (info->is_directory) {
    const CheckpointStore store(
        absl::StrCat(path, "/shard-", shard, "-of-", num_shards), 1, env);
    const std::vector<std::string> all = store.List();
    if (all.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint of shard ", shard, " of ", num_shards, " in ",
          store.dir_,
          " (a --checkpoint_dir of a job with as many shards; `lockstep_ctl "
          "reshard` rewrites one of another shard count)"));
    }
    file = all.back();
  }
  absl::StatusOr<std::string> contents = env->ReadFile(file);
  if (!contents.ok()) return Unavailable(contents.status());
  absl::StatusOr<ShardCheckpoint> checkpoint = DecodeCheckpoint(*contents);
  if (!checkpoint.ok()) {
    return absl::Status(
        checkpoint.status().code(),
        absl::StrCat(file, ": ", checkpoint.status().message()));
  }
  return checkpoint;
}

absl::StatusOr<std::unique_ptr<const CheckpointStore>>
CheckpointStore::OpenToRead(const std::string& path, int shard, int num_shards,
                            Env* env) {
  const std::string dir =
      absl::StrCat(path, "/shard-", shard, "-of-", num_shards);
  const absl::StatusOr<FileInfo> info = env->Stat(dir);
  if (!info.ok() || !info->is_directory) {
    return absl::NotFoundError(absl::StrCat("no folder ", dir, " (shard ",
                                            shard, " of ", num_shards,
                                            "'s checkpoints)"));
  }
  return std::unique_ptr<const CheckpointStore>(
      new CheckpointStore(dir, 1, env));
}

std::vector<std::string> CheckpointStore::SetAside() const {
  return Files(absl::StrCat(kSuffix, ".corrupt"));
}

}  // namespace lockstep
