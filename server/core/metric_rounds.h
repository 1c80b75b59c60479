// Averages of a few numbers over a job's workers: the metrics a training
// script reports (a loss, an accuracy), never gradients, which take the
// step barriers.
//
// Each rank numbers its calls from 0 (its round); a round is answered to
// every rank that took part once all `num_workers` have contributed, with
// the element-wise mean. Ranks that disagree on a round's name or length
// fail it for all (nobody waits for a round that cannot complete), and so
// does a rank that leaves while the round waits for it. A rank that calls
// again for a round already answered (a retry) gets the same answer.
//
// Thread-safe: one lock, a leaf of the server's lock order; callbacks run
// after it is released.
#ifndef LOCKSTEP_SERVER_CORE_METRIC_ROUNDS_H_
#define LOCKSTEP_SERVER_CORE_METRIC_ROUNDS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace lockstep {

class MetricRounds final {
 public:
  using Callback = std::function<void(absl::StatusOr<std::vector<double>>)>;
  // At most this many values a call (INVALID_ARGUMENT beyond).
  static constexpr int kMaxValues = 4096;
  // Answered rounds kept for retries.
  static constexpr int kKeptAnswers = 16;

  explicit MetricRounds(int num_workers) : num_workers_(num_workers) {}

  MetricRounds(const MetricRounds&) = delete;
  MetricRounds& operator=(const MetricRounds&) = delete;

  // Rank `rank` (checked by the caller) adds `values` to its round `round`;
  // `done` gets the mean once every rank has, or why the round failed.
  void Contribute(int rank, int64_t round, const std::string& name,
                  std::vector<double> values, Callback done);

  // Fails every round that waits for `rank` (it left the job).
  void Leave(int rank);

  // Fails every waiting round with `why` and refuses new ones.
  void Shutdown(const absl::Status& why);

 private:
  struct Round {
    std::string name;
    std::vector<double> sum;
    std::vector<bool> contributed;
    int count = 0;
    std::vector<Callback> waiting;
  };

  const int num_workers_;

  absl::Mutex mu_;
  std::map<int64_t, Round> open_ ABSL_GUARDED_BY(mu_);
  // By round: the mean, or why the round failed.
  std::map<int64_t, absl::StatusOr<std::vector<double>>> answered_
      ABSL_GUARDED_BY(mu_);
  absl::Status shut_down_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_METRIC_ROUNDS_H_
