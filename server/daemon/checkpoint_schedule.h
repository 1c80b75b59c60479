// When the server's periodic checkpoint is due: every N steps and/or every
// interval since the last save, not for a version already saved, and after
// a failed save not before its retry delay (5 s, doubling to 5 min, until
// a save succeeds), since each try snapshots and encodes the whole shard.
//
// Owns only those figures; does no I/O and reads no clock (the caller
// passes the time). Externally synchronized (Checkpointer holds it under
// its lock).
#ifndef LOCKSTEP_SERVER_DAEMON_CHECKPOINT_SCHEDULE_H_
#define LOCKSTEP_SERVER_DAEMON_CHECKPOINT_SCHEDULE_H_

#include <cstdint>

#include "absl/time/time.h"

namespace lockstep {

class CheckpointSchedule final {
 public:
  // `every_steps` <= 0 and `every` <= 0 turn that trigger off. The interval
  // counts from `start` until the first save.
  CheckpointSchedule(int64_t every_steps, absl::Duration every,
                     absl::Time start);

  // Whether `version`, the shard's newest, should be saved at `now`; with
  // `by_steps` false only the interval counts (the versions a step count
  // asks for are saved as they are published: ChunkBarrier::PinEvery).
  bool Due(int64_t version, absl::Time now, bool by_steps = true) const;
  // Whether a failed save's retry delay still runs at `now`.
  bool Retrying(absl::Time now) const { return now < retry_at_; }
  // A save of `version` succeeded at `at` (on the clock, on request or at
  // the end): the interval restarts and any retry delay ends.
  void Saved(int64_t version, absl::Time at);
  // `version` was restored from a checkpoint: it need not be saved again.
  // The interval is not restarted.
  void Restored(int64_t version) { last_saved_version_ = version; }
  // A periodic save failed at `now`; returns the delay before the next try.
  absl::Duration Failed(absl::Time now);

  // -1 before any save or restore.
  int64_t last_saved_version() const { return last_saved_version_; }

 private:
  const int64_t every_steps_;
  const absl::Duration every_;
  int64_t last_saved_version_ = -1;
  absl::Time last_saved_;
  absl::Duration backoff_ = absl::ZeroDuration();
  absl::Time retry_at_ = absl::InfinitePast();
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_CHECKPOINT_SCHEDULE_H_
