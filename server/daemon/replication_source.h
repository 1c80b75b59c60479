// The primary's side of a standby shard (lockstep_server --replicas=2,
// docs/faults.md "Standby failover"): it hands each version the shard
// publishes, with the optimizer state, to the standby that follows it
// (ReplicationService's Follow), and holds every push's and pull's answer
// of a chunk version the standby does not hold yet (a ReplyGate).
// Replication is thus synchronous: no worker ever holds a chunk version its
// standby lacks, so a standby that takes over goes on from the version the
// job is at and no step is computed again.
//
// The states are the core's snapshots, taken as the chunks are whenever an
// answer waits (in sync mode every chunk version has one: the pushes that
// closed it), so that a worker pushing its chunks a few at a time
// (--push_window) gets each answer without the step's later chunks; the
// standby lines them up when it takes over (server/daemon/
// standby_state.h). A standby attaching gets a lined-up state first. One
// that stops following for `standby_timeout` is given up: the held answers
// go out and the shard goes on alone (said in the log), until a standby
// follows again.
//
// One thread of its own encodes and answers. Thread-safe.
#ifndef LOCKSTEP_SERVER_DAEMON_REPLICATION_SOURCE_H_
#define LOCKSTEP_SERVER_DAEMON_REPLICATION_SOURCE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/daemon_log.h"
#include "server/rpc/replication_service.h"

namespace lockstep {

class ReplicationSource final : public ReplyGate {
 public:
  struct Options {
    // A standby that has not called for this long is given up.
    absl::Duration standby_timeout = absl::Seconds(5);
    // The longest a Follow waits for a new version (its heartbeat).
    absl::Duration longest_wait = absl::Milliseconds(200);
  };

  // `core` (not owned) outlives this.
  ReplicationSource(const Options& options, ParameterServer* core,
                    DaemonLog log);
  ~ReplicationSource() override;

  ChunkCallback Wrap(ChunkCallback done) override ABSL_LOCKS_EXCLUDED(mu_);

  // A standby's Follow (ReplicationService::FollowFn).
  void Follow(int64_t held, const std::string& standby,
              ReplicationService::Done done) ABSL_LOCKS_EXCLUDED(mu_);

  // The job is over: the follower is told so (it ends too). True once it
  // has been told, false when `timeout` passes first (or none follows).
  bool TellJobDone(absl::Duration timeout) ABSL_LOCKS_EXCLUDED(mu_);

  // Answers what is held (UNAVAILABLE: the server is going) and ends the
  // thread. Called by the destructor too.
  void Shutdown() ABSL_LOCKS_EXCLUDED(mu_);

  struct Stats {
    int64_t versions_sent = 0;
    int64_t bytes_sent = 0;
    double encode_seconds = 0;  // Taking the state and encoding it.
  };
  Stats stats() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Held {
    int chunk;
    int64_t version;
    ChunkCallback done;
    absl::StatusOr<ChunkSnapshot> answer;
  };
  struct Pending {
    int64_t held;
    ReplicationService::Done done;
    absl::Time since;
  };

  void Loop() ABSL_LOCKS_EXCLUDED(mu_);
  // The held answers the standby holds the versions of (`all`: every one),
  // removed for the caller to run outside the lock.
  std::vector<Held> ReleaseLocked(bool all) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The version of `chunk` the standby holds; -1: none.
  int64_t AckedLocked(int chunk) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The state to send a follower holding state number `held`, or nullopt
  // for none yet; releases the lock while the core takes it.
  std::optional<ShardCheckpoint> StateToSendLocked(int64_t held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  ParameterServer* const core_;  // Not owned.
  const DaemonLog log_;

  mutable absl::Mutex mu_;
  absl::CondVar wake_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool job_done_ ABSL_GUARDED_BY(mu_) = false;
  bool told_done_ ABSL_GUARDED_BY(mu_) = false;
  // A standby holds state number sent_sequence_, whose chunk versions are
  // acked_: every answer up to them may go.
  bool attached_ ABSL_GUARDED_BY(mu_) = false;
  std::map<int, int64_t> acked_ ABSL_GUARDED_BY(mu_);
  // The last state sent: its number, version and chunk versions.
  int64_t sent_sequence_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sent_version_ ABSL_GUARDED_BY(mu_) = -1;
  std::map<int, int64_t> sent_chunks_ ABSL_GUARDED_BY(mu_);
  std::string standby_ ABSL_GUARDED_BY(mu_);
  absl::Time last_follow_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  std::optional<Pending> pending_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_DAEMON_REPLICATION_SOURCE_H_
