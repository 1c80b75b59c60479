// How one chunk turns pushes into updates: the job's SyncMode as a rule
// over the chunk's ChunkCore.
//   SyncStepRule  (kSync) every step waits for W - b distinct workers (b =
//                 backup workers), divides their sum by how many came,
//                 applies once and answers them all with the new version.
//                 A push of a step already closed is answered with the
//                 current weights (a re-sent one, or a straggler beaten by
//                 the backups, which is counted as dropped).
//   AsyncRule     (kAsync) every push is applied at once on its own and
//                 answered with the result.
//   SspRule       (kSsp) like AsyncRule, but the answer to a push for step s
//                 is held until every worker has pushed step s - k (k =
//                 staleness); a worker evicted after the step timeout is
//                 not waited for until it has caught up again.
// ChunkBarrier chooses the rule once and calls it under its lock, with the
// push already checked and summed (unless the rule says it was counted).
//
// Not thread-safe: ChunkBarrier's lock guards it.
#ifndef LOCKSTEP_SERVER_CORE_SYNC_RULE_H_
#define LOCKSTEP_SERVER_CORE_SYNC_RULE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"
#include "server/core/chunk_core.h"
#include "server/core/chunk_versions.h"

namespace lockstep {

// kSync: the step being gathered, since when, and who has not pushed it.
// kSsp: the slowest ranks' next step, since when a push has been held for
// it, and those ranks.
struct ChunkGathering {
  int64_t step = 0;
  absl::Time since;
  std::vector<int> missing;
};

// What a rule says of a push before anything is summed.
enum class Admission {
  kSum,        // Sum it (unless counted already) and Take it.
  kAnswerNow,  // Answer it with the current weights; nothing is summed.
};

class SyncRule {
 public:
  // The rule of `policy` for `num_workers` over `core` (not owned; it
  // outlives the rule). With `record_arrivals` the sync step keeps its
  // pushes' arrivals for the observer.
  static std::unique_ptr<SyncRule> Create(const SyncPolicy& policy,
                                          int num_workers, bool record_arrivals,
                                          ChunkCore* core);
  virtual ~SyncRule() = default;

  // A push of `rank` (in range) for `step` (>= 0) to an initialized chunk;
  // an error refuses it.
  virtual absl::StatusOr<Admission> Admit(int rank, int64_t step) = 0;
  // Whether the rule counted this push already (it is not summed again):
  // in sync mode a rank's second push of the step being gathered; in async
  // and SSP a re-sent push of the rank's last step.
  virtual bool Counted(int rank, int64_t step) const = 0;
  // After the sum: waits or applies as the rule says; `done` gets its
  // answer now (in `answers`) or when the rule gives it.
  virtual void Take(int rank, int64_t step, bool counted, absl::Time arrival,
                    ChunkCallback done, ChunkAnswers* answers) = 0;
  // After a Take that published a version: the arrivals of its step, by
  // rank (sync mode with record_arrivals; left empty otherwise).
  virtual void TakeArrivals(std::vector<absl::Time>* /*arrivals*/) {}

  // See ChunkBarrier::Pending, Expire and HasPushed.
  virtual std::optional<ChunkGathering> Pending() const = 0;
  virtual bool Expire(int64_t step, const absl::Status& status,
                      ChunkAnswers* answers) = 0;
  virtual bool HasPushed(int rank) const = 0;
  // kSsp: stops waiting for those of `ranks` that are the slowest (evicted
  // after the step timeout), answering the pushes held only for them; each
  // is waited for again once it has caught up with the others. Returns
  // whether it left any out. The other modes have no one to leave out.
  virtual bool Excuse(absl::Span<const int> /*ranks*/,
                      ChunkAnswers* /*answers*/) {
    return false;
  }
  // Answers every push the rule holds with `status`.
  virtual void Close(const absl::Status& status, ChunkAnswers* answers) = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_SYNC_RULE_H_
