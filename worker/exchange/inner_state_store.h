// Where a LocalSGD or DiLoCo worker keeps its inner optimizer's state
// (--inner_state_dir): the servers checkpoint the outer weights and
// momentum, not each worker's Adam moments, so a worker process that is
// replaced would start its rounds with fresh ones and leave the fault-free
// trajectory. Before each round's push the worker saves the state that the
// next round starts with, named by that round's version
// (DIR/inner-rank<R>-v<V>.safetensors: one float32 tensor per optimizer
// slot, readable by any safetensors tool), and keeps the kKeep up to it.
// A replacement that joins at version V takes the state saved for V, so a
// worker killed at any point of a round, or the servers stepped back by
// fewer than kKeep rounds, go on as if nothing happened.
//
// One folder may hold every rank's files; each rank reads only its own.
// Thread-compatible.
#ifndef LOCKSTEP_WORKER_EXCHANGE_INNER_STATE_STORE_H_
#define LOCKSTEP_WORKER_EXCHANGE_INNER_STATE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/optim/optimizer.h"

namespace lockstep {

// An optimizer's state vectors (Optimizer::Slots), one after another, and
// back into an optimizer of the same kind and size.
std::vector<float> FlatSlots(Optimizer& optimizer);
void SetFlatSlots(Optimizer& optimizer, absl::Span<const float> flat);

class InnerStateStore final {
 public:
  // Versions whose state a rank keeps.
  static constexpr int kKeep = 3;

  // `env` is not owned (tests pass their own).
  InnerStateStore(std::string dir, int rank, Env* env = Env::Default())
      : dir_(std::move(dir)), rank_(rank), env_(env) {}

  // The file of `version`'s state.
  std::string PathOf(int64_t version) const;

  // Writes `optimizer`'s state as the one `version` starts with (creating
  // the folder; atomically: a kill leaves the file whole or absent), then
  // removes this rank's files of versions kKeep or more below it, and
  // those above it (another history's). An optimizer without state (SGD)
  // writes nothing.
  absl::Status Save(int64_t version, Optimizer& optimizer);

  // Removes this rank's files of versions above `version` (a job that
  // joins there: they are another history's, not to be taken later).
  void ForgetAfter(int64_t version);

  // Loads the state saved for `version` into `optimizer`: true when it
  // did, false when there is none (NOT_FOUND is not an error);
  // FAILED_PRECONDITION, naming the file, when it holds other slots or
  // sizes (another model or optimizer: the folder is another job's).
  absl::StatusOr<bool> Load(int64_t version, Optimizer& optimizer) const;

  // This rank's saved versions, oldest first.
  absl::StatusOr<std::vector<int64_t>> Versions() const;

 private:
  const std::string dir_;
  const int rank_;
  Env* const env_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_INNER_STATE_STORE_H_
