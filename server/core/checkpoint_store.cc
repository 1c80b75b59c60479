// CheckpointStore (declared in checkpoint.h): the folder of one shard's
// checkpoints, written atomically and pruned, loaded newest first with the
// damaged ones set aside. checkpoint.cc holds the file format.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "common/status_macros.h"
#include "server/core/checkpoint.h"

namespace lockstep {
namespace {

constexpr char kSuffix[] = ".lsc";
// A temporary checkpoint file nobody has written for this long is a
// leftover of a writer that died.
constexpr absl::Duration kStaleTmpAge = absl::Minutes(10);

absl::Status Errno(absl::string_view what, const std::string& path) {
  return absl::UnavailableError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

absl::Status WriteAll(int fd, absl::string_view bytes,
                      const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status FsyncPath(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags);
  if (fd < 0) return Errno("cannot open", path);
  const int rc = fsync(fd);
  close(fd);
  return rc == 0 ? absl::OkStatus() : Errno("cannot fsync", path);
}

// The whole file, read with POSIX calls so that a failure names its errno.
absl::StatusOr<std::string> ReadAll(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  std::string bytes;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const absl::Status error = Errno("cannot read", path);
      close(fd);
      return error;
    }
    if (n == 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return bytes;
}

absl::Status MakeDirs(const std::string& dir) {
  std::string path;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || dir[i] == '/') {
      path = dir.substr(0, i);
      if (!path.empty() && mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
        return Errno("cannot create", path);
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Create(
    const std::string& dir, int shard, int num_shards, int keep, Env* env) {
  if (keep < 1) {
    return absl::InvalidArgumentError("must keep at least one checkpoint");
  }
  const std::string shard_dir =
      absl::StrCat(dir, "/shard-", shard, "-of-", num_shards);
  RETURN_IF_ERROR(MakeDirs(shard_dir));
  // Found now, not at the first save: a file in the way, or a folder this
  // user cannot write.
  struct stat st;
  if (stat(shard_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
      access(shard_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint folder ", shard_dir, " is not a writable directory"));
  }
  return std::unique_ptr<CheckpointStore>(
      new CheckpointStore(shard_dir, keep, env));
}

std::vector<std::string> CheckpointStore::Files(
    absl::string_view suffix) const {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir_.c_str())) {
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (absl::StartsWith(name, "ckpt-") && absl::EndsWith(name, suffix)) {
        names.push_back(name);
      }
    }
    closedir(d);
  }
  // Zero-padded versions sort by name.
  std::sort(names.begin(), names.end());
  for (std::string& name : names) name = absl::StrCat(dir_, "/", name);
  return names;
}

std::vector<std::string> CheckpointStore::List() const {
  return Files(kSuffix);
}

absl::StatusOr<std::string> CheckpointStore::Save(
    const ShardCheckpoint& checkpoint) {
  const std::string path =
      absl::StrFormat("%s/ckpt-%012d%s", dir_, checkpoint.version, kSuffix);
  const std::string tmp = path + ".tmp";
  const std::string bytes = EncodeCheckpoint(checkpoint, env_->Now());
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return Errno("cannot create", tmp);
  absl::Status written = WriteAll(fd, bytes, tmp);
  if (written.ok() && fsync(fd) != 0) written = Errno("cannot fsync", tmp);
  close(fd);
  if (!written.ok()) {
    unlink(tmp.c_str());
    return written;
  }
  if (absl::Status renamed = env_->RenameFile(tmp, path); !renamed.ok()) {
    unlink(tmp.c_str());
    return absl::UnavailableError(renamed.message());
  }
  RETURN_IF_ERROR(FsyncPath(dir_, O_RDONLY | O_DIRECTORY));
  std::vector<std::string> all = List();
  for (size_t i = 0; i + keep_ < all.size(); ++i) {
    if (all[i] != path) unlink(all[i].c_str());
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
    struct stat st;
    if (stat(path.c_str(), &st) == 0 &&
        now - absl::TimeFromTimespec(st.st_mtim) >= kStaleTmpAge &&
        unlink(path.c_str()) == 0) {
      notes->push_back(
          absl::StrCat("removed ", path,
                       ", left by a checkpoint write that did not finish"));
    }
  }
  std::vector<std::string> all = List();
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    // A file that cannot be read (permissions, an I/O error) is not known
    // to be damaged: stop rather than set it aside and roll back.
    absl::StatusOr<std::string> contents = ReadAll(*it);
    if (!contents.ok()) {
      return absl::Status(
          contents.status().code(),
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
    const std::string& path, int shard, int num_shards) {
  std::string file = path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Errno("cannot read", path);
  if (S_ISDIR(st.st_mode)) {
    const CheckpointStore store(
        absl::StrCat(path, "/shard-", shard, "-of-", num_shards), 1,
        Env::Default());
    const std::vector<std::string> all = store.List();
    if (all.empty()) {
      return absl::NotFoundError(absl::StrCat(
          "no checkpoint of shard ", shard, " of ", num_shards, " in ",
          store.dir_, " (a --checkpoint_dir of a job with as many shards)"));
    }
    file = all.back();
  }
  ASSIGN_OR_RETURN(const std::string contents, ReadAll(file));
  absl::StatusOr<ShardCheckpoint> checkpoint = DecodeCheckpoint(contents);
  if (!checkpoint.ok()) {
    return absl::Status(
        checkpoint.status().code(),
        absl::StrCat(file, ": ", checkpoint.status().message()));
  }
  return checkpoint;
}

std::vector<std::string> CheckpointStore::SetAside() const {
  return Files(absl::StrCat(kSuffix, ".corrupt"));
}

}  // namespace lockstep
