// Per-epoch progress output of a worker: a redrawn bar on a terminal, or a
// few plain lines for logs. Writes to a FILE (stdout); not thread-safe.
#ifndef LOCKSTEP_WORKER_TRAIN_PROGRESS_H_
#define LOCKSTEP_WORKER_TRAIN_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace lockstep {

enum class ProgressMode { kNone, kLines, kBar };

// "bar", "lines", "none", or "auto" (bar on a terminal, else lines).
absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view text);

class EpochProgress final {
 public:
  EpochProgress(ProgressMode mode, FILE* out, int epoch, int epochs,
                int64_t steps);

  // After each step: running mean loss and accuracy of this worker's batches
  // and the global examples per second so far.
  void Update(int64_t step_in_epoch, double loss, double accuracy,
              double examples_per_sec);
  // Ends the epoch's bar with its final figures.
  void Finish(double loss, double accuracy, double examples_per_sec);

 private:
  std::string Line(int64_t done, double loss, double accuracy,
                   double examples_per_sec) const;

  const ProgressMode mode_;
  FILE* const out_;  // Not owned.
  const int epoch_;
  const int epochs_;
  const int64_t steps_;
  absl::Time last_draw_ = absl::InfinitePast();
  int next_quarter_ = 1;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_PROGRESS_H_
