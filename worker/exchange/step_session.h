// One worker's step protocol, for every sync mode: how its gradients meet
// the other workers' each step, through the parameter servers
// (PsStepSession: sync, async, ssp, elastic sync) or by all-reduce among
// the workers (AllReduceStepSession). The C++ Trainer and the Python
// package's native client drive it the same way, and neither asks which
// mode it is:
//
//   ASSIGN_OR_RETURN(StepOutcome at, session->Join(signature, initial,
//                                                  weights, {}, timeout));
//   while (at.next_step < total && !session->Stopping()) {
//     ASSIGN_OR_RETURN(StepPlan plan, session->BeginStep());
//     // Compute plan.batch_shards' gradient of step plan.step into
//     // plan.gradient, calling session->GradientReady(begin, end) as
//     // ranges become final (plan.streams); AbandonStep if that fails.
//     ASSIGN_OR_RETURN(at, session->FinishStep());
//     if (at.stopped) break;  // A failed step after a stop signal.
//     // at.rejoined: the session joined again, at.next_step anywhere.
//   }
//   session->Leave();
//
// The session owns everything the mode decides: which step comes next
// (the servers' version in sync mode, the worker's own count in async and
// SSP), which batch shards this worker computes (an elastic job's members
// cover absent ranks), whether those are summed locally, registering again
// after a retryable failure (backoff and deadline: Rejoiner), re-forming an
// elastic group at a step boundary, and the all-reduce ranks' agreement to
// stop. The weights buffer given to Join is written with each new version.
//
// Vectors are the flat layout of the model signature: the trainable
// parameters, then the model's state (batch-norm moving statistics). A
// shard's gradient vector carries the mean gradient of its batch for the
// parameters and this worker's updated state for the state; the weights
// receive the next parameters and the workers' mean state.
//
// Externally synchronized (the training thread), except
// LeaveFromAnyThread.
#ifndef LOCKSTEP_WORKER_EXCHANGE_STEP_SESSION_H_
#define LOCKSTEP_WORKER_EXCHANGE_STEP_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/base/leave_note.h"
#include "common/model/model_signature.h"
#include "common/rpc/group_membership.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/ps/ps_client.h"

namespace lockstep {

// What the caller computes in a step.
struct StepPlan {
  int64_t step = 0;  // The step whose examples to train on.
  // The shards of the step's global batch (one batch of the job's per-worker
  // size each, numbered like the ranks) this worker computes, in order: its
  // own, plus the absent ranks' it covers in an elastic job.
  std::vector<int> batch_shards;
  // Where the gradient goes. With sum_shards_locally every shard's
  // gradient is added into the one vector (n values, n the weights' size);
  // otherwise shard k's is gradient[k * n, (k + 1) * n).
  absl::Span<float> gradient;
  bool sum_shards_locally = true;
  // Whether GradientReady sends ranges as backprop finishes them (one
  // shard, parameter servers); otherwise the session sends at FinishStep
  // and GradientReady need not be called.
  bool streams = false;
};

// Where a step (or a Join) left this worker.
struct StepOutcome {
  // This worker's gradient went into `version`: the step counts.
  bool applied = false;
  int64_t version = 0;    // Of the weights now in the buffer.
  int64_t next_step = 0;  // The step this worker trains next.
  // The session joined the job again (after a retryable failure, or
  // because the group changes at this step boundary): next_step may be
  // anywhere, and the data position follows it.
  bool rejoined = false;
  // The step failed after a stop signal (its servers may be draining or
  // gone): the run ends here, as a stop, and leaves the job. (A step that
  // succeeds after a stop signal says nothing here: Stopping() tells.)
  bool stopped = false;
};

// Everything a session is made of; parsed once from flags (lockstep_worker)
// or given by the Python package. Not every field applies to every mode.
struct StepSessionOptions {
  // Parameter servers (every PS mode), or all-reduce among the workers.
  bool allreduce = false;
  int rank = 0;
  int num_workers = 1;  // --workers: the global batch's shards.
  // The servers: every PS mode's data path; all-reduce only leaves there.
  PsClientOptions client;
  AllReduceOptions reducer;  // All-reduce: this rank's and the backend's.
  // Elastic jobs (min_workers below num_workers), either kind.
  GroupOptions group;
  // Semi-synchronous jobs (LocalSGD, DiLoCo; parameter servers in sync
  // mode): above 1, each worker takes this many steps of the job's
  // optimizer on its own, then pushes the change of its weights, and the
  // servers run outer_optimizer on the workers' mean change
  // (SemiSyncStepSession).
  int local_steps = 0;
  OptimizerConfig outer_optimizer;
  // Semi-synchronous: where the worker keeps its inner optimizer's state
  // for a replacement to go on with (InnerStateStore); empty: nowhere.
  std::string inner_state_dir;
  // The clock and sleeps of the rejoin backoff. Not owned.
  Env* env = Env::Default();
  // After a retryable failure, register again for at most this long since
  // the last step that succeeded; errors call it rejoin_timeout_name.
  absl::Duration rejoin_timeout = absl::Seconds(300);
  std::string rejoin_timeout_name = "rejoin_timeout";
  std::string who = "lockstep_worker";  // Starts the lines it prints.
  uint64_t seed = 42;                   // The rejoin jitter's.
  // Set by a stop signal (not owned; may be null): the run stops after the
  // current step (all-reduce: after the step in which the ranks learn of
  // it), and a step that fails after it ends the run as a stop.
  const std::atomic<bool>* stop_requested = nullptr;
  // All-reduce: makes each generation's reducer (tests pass their own).
  std::function<absl::StatusOr<std::unique_ptr<AllReducer>>(
      const AllReduceOptions&)>
      create_reducer = CreateAllReducer;
};

class StepSession {
 public:
  // The weights of version 0 (parameters, then state), when this process
  // defines them.
  using InitialFn = std::function<std::vector<float>()>;

  // The session of options.allreduce's kind, with its own server client.
  static absl::StatusOr<std::unique_ptr<StepSession>> Create(
      StepSessionOptions options);

  virtual ~StepSession() = default;

  // Joins the job: registers (and forms the group, where there is one),
  // writes the version to start from into `weights` (kept, not owned: every
  // later version lands there too) and says which step comes next.
  // `gradient` (not owned; may be empty) is a one-shard gradient buffer the
  // caller lends (the Python package's tensors view it), of the weights'
  // size: plans of one shard point there; otherwise the session's own
  // buffers are used. `initial` makes version 0 when this process defines
  // it; a rejoin that finds the job without weights calls it again, so it
  // must stay valid while the session is used. FAILED_PRECONDITION when a
  // synchronous job is already past signature.total_steps (when set).
  virtual absl::StatusOr<StepOutcome> Join(const ModelSignature& signature,
                                           InitialFn initial,
                                           absl::Span<float> weights,
                                           absl::Span<float> gradient,
                                           absl::Duration timeout) = 0;

  // Starts the next step; the plan says what to compute and where. The
  // plan's gradient stays valid until the next BeginStep.
  virtual absl::StatusOr<StepPlan> BeginStep() = 0;
  // The step's batch is ready (after BeginStep, before the forward pass):
  // what came before it is reported as input, what follows as compute
  // (the straggler verdict, docs/operations.md). Optional: without it the
  // input is counted as compute.
  virtual void InputReady() {}
  // Work of the step under way done before its BeginStep, outside the
  // session (a round's earlier local steps: SemiSyncStepSession): reported
  // with the step's own phases, `input` as input and `compute` as
  // compute. Optional.
  virtual void WorkBefore(absl::Duration input, absl::Duration compute) {}
  // plan.gradient[begin, end) is final: sends what it completes.
  virtual void GradientReady(int64_t begin, int64_t end) = 0;
  // Sends the rest, waits for the next version and writes it into the
  // weights. After a retryable failure it registers again (backoff,
  // deadline) and says so (rejoined); after a stop signal it says stopped.
  // Errors are failures the run cannot go on from.
  virtual absl::StatusOr<StepOutcome> FinishStep() = 0;
  // Ends a step whose gradient is not to be sent (its computation failed);
  // the weights then hold one version throughout (what had been sent may
  // have brought parts of the next).
  virtual absl::Status AbandonStep() = 0;

  // Whether the run should stop before another step (a stop signal; with
  // all-reduce, one the ranks agreed on).
  virtual bool Stopping() const = 0;

  // The element-wise mean of `values` over the workers (a script's
  // metrics, not gradients); every worker must make the same calls, with
  // the same name and length. Waits up to `timeout`. Call between steps.
  virtual absl::StatusOr<std::vector<double>> Average(
      const std::string& name, absl::Span<const double> values,
      absl::Duration timeout) = 0;

  // Says this worker is done, and why: finished (the servers end a
  // synchronous job whose other ranks still train, as their steps cannot
  // complete), failed (the job ends as failed unless a replacement
  // finishes) or stopped. A group that finishes the job also leaves for the
  // ranks missing from it, so that the servers need not wait.
  virtual absl::Status Leave(const LeaveNote& note) = 0;
  // Leave, as a stopping worker's last word from any thread while the
  // training thread may be inside another call. Thread-safe.
  virtual absl::Status LeaveFromAnyThread() = 0;

  // Times the session registered again after a failure.
  virtual int64_t rejoins() const = 0;
  // Client-side time of the steps so far (parameter servers; zero
  // otherwise). Call between steps.
  virtual StepTimings step_timings() const = 0;
  // The push window in use (0: none).
  virtual int push_window() const = 0;
  // The batch shards the next step's plan names (its own rank's, then the
  // absent ranks' it covers in an elastic job), as the group stands now: a
  // regroup (a rejoin) may change them. Call between steps.
  virtual std::vector<int> NextBatchShards() const = 0;
};

// For the sessions' Join: INVALID_ARGUMENT unless `weights` (and
// `gradient`, when not empty) hold the signature's parameters and state.
absl::Status CheckSessionBuffers(const ModelSignature& signature,
                                 absl::Span<const float> weights,
                                 absl::Span<const float> gradient);
// For the sessions' Join: FAILED_PRECONDITION when `joined` is past the
// job's signature.total_steps (when set): a worker that joins a job
// already further than its own length (another run's servers, or flags
// that differ) must not train on.
absl::Status CheckNotPastEnd(const ModelSignature& signature,
                             const StepOutcome& joined);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_STEP_SESSION_H_
