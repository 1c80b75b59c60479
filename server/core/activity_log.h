// What one shard last saw of each rank: its last contact, its latest step
// pushed and how long its last step took (WorkerActivity in the proto), and
// over a window of its recent steps when its pushes arrived and what its
// worker reported of them, for the straggler verdict
// (common/ops/straggler_verdict.h).
//
// Thread-safe: one lock, taken once per call a worker makes, and a leaf of
// the server's lock order (nothing is called under it).
#ifndef LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_
#define LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/rpc/step_report.h"
#include "server/core/push_checks.h"

namespace lockstep {

// Medians over a rank's recent steps (RankTiming in straggler_verdict.h).
struct ActivityWindow {
  // From the step's first push by any rank to this rank's last push of
  // it; meaningful where every rank pushes the same steps (sync mode).
  int late_steps = 0;
  absl::Duration lateness;
  int timed_steps = 0;  // Between its first pushes of consecutive steps.
  absl::Duration step_time;
  int reports = 0;  // The worker's own (StepReport).
  absl::Duration input, compute, push, wait;
};

// What the shard last saw of one rank (see WorkerActivity in the proto).
struct WorkerActivity {
  int rank = 0;
  absl::Time last_contact = absl::InfinitePast();  // Any RPC; past: never.
  int64_t last_step = -1;  // Latest step pushed; -1: none.
  // Between the first pushes of its two latest steps (when consecutive);
  // zero until then.
  absl::Duration last_step_time;
  ActivityWindow window;
};

class ActivityLog final {
 public:
  // Steps each rank's window holds.
  static constexpr int kWindow = 16;

  explicit ActivityLog(int num_workers);

  ActivityLog(const ActivityLog&) = delete;
  ActivityLog& operator=(const ActivityLog&) = delete;

  // Records a call from `rank` at `when`; a push also names its step and
  // may carry its worker's report of an earlier step. Ranks out of range
  // are ignored.
  void Note(int rank, absl::Time when, int64_t pushed_step = kNotAPush,
            const StepReport& report = {});

  // An all-reduce rank's reports of its steps, oldest first
  // (Coordinator.ReportSteps), received at `when`. No pushes arrive in
  // such a job, so each new report is also a sample of the rank's step
  // time: the sum of its phases (and the latest is its last step and
  // last step time). A report of a step already taken is
  // dropped (a regrouped job redoes a step); steps that go back by more
  // start the window again, as pushes do.
  void NoteReports(int rank, absl::Time when,
                   absl::Span<const StepReport> reports);

  // One per rank, in rank order. Given `now`, the window of a rank that
  // has not pushed for 2 s and 4 of its steps counts no samples (it left,
  // or waits): it is not judged on what it did before.
  std::vector<WorkerActivity> Get(absl::Time now = absl::InfinitePast()) const;

 private:
  struct Samples {
    int64_t step = -1;  // The step whose pushes arrive now.
    absl::Time first, last;  // Its first and latest push.
    int64_t reported = -1;  // The latest step a report was taken for.
    std::deque<absl::Duration> lateness, step_time;
    std::deque<StepReport> reports;
  };
  void CloseStep(Samples* s, absl::Time next_first)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Reset(Samples* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<WorkerActivity> activity_ ABSL_GUARDED_BY(mu_);
  std::vector<Samples> samples_ ABSL_GUARDED_BY(mu_);
  // The first push of each recent step by any rank, by step.
  std::deque<std::pair<int64_t, absl::Time>> opened_ ABSL_GUARDED_BY(mu_);
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CORE_ACTIVITY_LOG_H_
