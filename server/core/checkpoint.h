// Checkpoints of one parameter-server shard: the format and the directory
// that keeps them.
//
// A checkpoint file is plain data:
//   "LSCKPT\n\0"                         8 bytes of magic
//   uint32 format version (1)            little-endian
//   uint64 header length H               little-endian
//   uint32 CRC-32 of the H header bytes  little-endian
//   H bytes: a lockstep.v1.CheckpointHeader (signature, shard, version, and
//            for every tensor its chunk, name, offset, length and CRC-32)
//   the tensors' raw little-endian fp32 bytes, at the offsets the header gives
// Nothing in it can run code. Files are written atomically (temporary file,
// fsync, rename, fsync of the folder) and named by version, so the newest is
// the one with the highest version; the last `keep` are kept.
#ifndef LOCKSTEP_SERVER_CORE_CHECKPOINT_H_
#define LOCKSTEP_SERVER_CORE_CHECKPOINT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "common/model/model_signature.h"

namespace lockstep {

// What a chunk of a shard saves: weights, optimizer slots, version.
struct ChunkState {
  int chunk = 0;
  int64_t version = 0;
  std::vector<float> weights;
  std::vector<std::pair<std::string, std::vector<float>>> slots;
};

struct ShardCheckpoint {
  ModelSignature signature;
  int shard = 0;
  int num_shards = 1;
  int num_workers = 1;
  int64_t version = 0;  // Also the data-order position: the next step.
  std::vector<ChunkState> chunks;  // The shard's own chunks.
};

inline constexpr uint32_t kCheckpointFormatVersion = 1;

// `written` is recorded in the header (CheckpointHeader.written_unix_micros).
std::string EncodeCheckpoint(const ShardCheckpoint& checkpoint,
                             absl::Time written = Env::Default()->Now());

// DATA_LOSS for a file that is truncated, has a bad magic or unknown format
// version, or whose header or tensor checksums do not match.
absl::StatusOr<ShardCheckpoint> DecodeCheckpoint(absl::string_view bytes);

// The checkpoints of one shard in a folder. Thread-compatible.
class CheckpointStore final {
 public:
  // Creates `dir` (and its parents) if needed; FAILED_PRECONDITION when the
  // shard's folder is not a directory this process can write. Every file
  // operation of the store goes through `env` (not owned), which is also
  // the clock of the files' write times and of the age of leftover
  // temporary files.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Create(
      const std::string& dir, int shard, int num_shards, int keep,
      Env* env = Env::Default());

  // The checkpoint another job left for this shard, to start a new job
  // from (the server's --init_from): `path` is a checkpoint file, or a
  // folder as CheckpointStore writes it (a --checkpoint_dir), whose shard
  // folder's newest checkpoint is read. Read only: nothing there is
  // renamed or removed. NOT_FOUND when there is none, DATA_LOSS when the
  // one read is damaged (no fallback to an older one: that would train
  // from other weights than the ones asked for). Read through `env`.
  static absl::StatusOr<ShardCheckpoint> ReadForInit(const std::string& path,
                                                     int shard, int num_shards,
                                                     Env* env = Env::Default());

  // The checkpoints of shard `shard` of `num_shards` in `path` (a
  // --checkpoint_dir), to read only: nothing is created or checked for
  // writing, and Save must not be called. NOT_FOUND when the shard's
  // folder does not exist.
  static absl::StatusOr<std::unique_ptr<const CheckpointStore>> OpenToRead(
      const std::string& path, int shard, int num_shards,
      Env* env = Env::Default());

  // Writes atomically (temporary file, fsync, rename, fsync of the folder)
  // and then removes all but the newest `keep`. Returns the path. On
  // failure UNAVAILABLE naming the file and the cause; no file under a
  // checkpoint's name is half written, the temporary file is removed, and
  // nothing older is pruned.
  absl::StatusOr<std::string> Save(const ShardCheckpoint& checkpoint);

  // The newest checkpoint that reads back intact, or nullopt when there is
  // none. Each corrupt one passed over is described in `*notes` and renamed
  // to NAME.corrupt, out of the way of later loads and of pruning. A file
  // that cannot be read (permissions, I/O) is an error, left in place: it
  // may be intact, and falling back would roll training back. Temporary
  // files of writes that did not finish, untouched for 10 minutes, are
  // removed (and noted).
  absl::StatusOr<std::optional<ShardCheckpoint>> LoadNewest(
      std::vector<std::string>* notes) const;

  // The versions of the checkpoint files, oldest first (not read: one may
  // turn out damaged when loaded).
  std::vector<int64_t> Versions() const;
  // The checkpoint of `version`: NOT_FOUND when there is no such file,
  // DATA_LOSS when it is damaged (not set aside: the caller decides),
  // UNAVAILABLE when it cannot be read.
  absl::StatusOr<ShardCheckpoint> Load(int64_t version) const;

  // Renames the checkpoints of versions after `version` to
  // NAME.stepped-back, out of the listing (a step back computes them
  // again); returns the new names.
  std::vector<std::string> SetAsideAfter(int64_t version) const;

  // The damaged checkpoints set aside (NAME.corrupt), now or by an earlier
  // load, oldest first. With no intact checkpoint left, these say the job
  // had progress that a fresh start would lose.
  std::vector<std::string> SetAside() const;

  // Checkpoint files, oldest first.
  std::vector<std::string> List() const;

 private:
  // The file a checkpoint of `version` is saved as.
  std::string PathOf(int64_t version) const;
  // The shard folder's ckpt-* files ending in `suffix`, oldest first.
  std::vector<std::string> Files(absl::string_view suffix) const;

  CheckpointStore(std::string dir, int keep, Env* env)
      : dir_(std::move(dir)), keep_(keep), env_(env) {}

  const std::string dir_;
  const int keep_;
  Env* const env_;  // Not owned.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_CHECKPOINT_H_
