#include "worker/python/native/client.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "worker/exchange/semi_sync_step_session.h"

namespace lockstep {
namespace {

namespace py = pybind11;

absl::Duration Seconds(double s) {
  return s > 0 ? absl::Seconds(s) : absl::InfiniteDuration();
}

}  // namespace

Client::Client(ClientOptions o) {
  StepSessionOptions options;
  options.rank = o.rank;
  options.client.servers = std::move(o.servers);
  options.client.standby_servers = std::move(o.standby_servers);
  options.client.wire_dtype = ValueOrThrow(ParseWireDType(o.wire_dtype));
  options.client.max_pushes_in_flight = o.push_window;
  options.client.push_thread = o.push_thread;
  options.client.connect_timeout = absl::Seconds(o.connect_timeout_s);
  options.client.rpc_timeout = absl::Seconds(o.rpc_timeout_s);
  options.client.step_timeout = absl::Seconds(o.step_timeout_s);
  options.client.tls = std::move(o.tls);  // Never the flags: a library.
  options.rejoin_timeout = absl::Seconds(o.rejoin_timeout_s);
  options.rejoin_timeout_name = "rejoin_timeout_s";
  options.who = absl::StrCat("lockstep worker ", o.rank);
  options.seed = o.seed;
  if (!o.rounds.empty()) {
    ThrowIfError(CheckLocalSteps(o.local_steps, "local_steps"));
    options.local_steps = o.local_steps;
    options.outer_optimizer = ValueOrThrow(
        OuterOptimizer(o.rounds, o.outer_lr, o.outer_momentum,
                       OuterOptimizerNames{"outer_lr", "outer_momentum"}));
    if (!o.inner_state_dir.empty()) {
      // Refused now, not at the first round's end.
      absl::Status can = Env::Default()->CreateDirs(o.inner_state_dir);
      if (can.ok()) {
        can = CheckCanWriteFile(
            "inner_state_dir",
            absl::StrCat(o.inner_state_dir, "/inner-rank", o.rank, ".probe"));
      }
      if (!can.ok()) ThrowIfError(absl::InvalidArgumentError(can.message()));
      options.inner_state_dir = o.inner_state_dir;
    }
  }
  session_ = ValueOrThrow(StepSession::Create(std::move(options)));
}

Client::~Client() {
  // An unfinished step's pushes reference the buffers: end it first.
  if (in_step_) {
    py::gil_scoped_release release;
    session_->AbandonStep().IgnoreError();
  }
}

StepOutcome Client::Join(const JoinRequest& r, const py::buffer& weights,
                         const py::buffer& gradient, double timeout_s) {
  EnsureNoStep("join");
  ModelSignature signature;
  signature.tensors = Tensors(r.tensors);
  signature.state_tensors = Tensors(r.state_tensors);
  signature.optimizer = r.optimizer;
  signature.chunk_bytes = r.chunk_bytes;
  signature.num_workers = r.num_workers;
  signature.num_shards = r.num_shards;
  // The Python API names the mode; an empty name is not a choice there.
  signature.sync.mode = ValueOrThrow(
      r.sync.empty() ? absl::InvalidArgumentError("sync must not be empty")
                     : ParseSyncMode(r.sync));
  signature.sync.backup_workers = r.backup_workers;
  signature.sync.staleness = r.staleness;
  signature.total_steps = r.total_steps;
  FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
  FloatBuffer g = RequestFloats(gradient, /*writable=*/true, "gradient");
  // Rank 0 defines version 0 from what the buffer holds now (the
  // framework's own initial weights) when the job has none.
  const absl::Span<float> span = w.span;
  auto initial = [span] {
    return std::vector<float>(span.begin(), span.end());
  };
  absl::StatusOr<StepOutcome> joined;
  {
    py::gil_scoped_release release;
    joined =
        session_->Join(signature, initial, w.span, g.span, Seconds(timeout_s));
  }
  const StepOutcome outcome = ValueOrThrow(std::move(joined));
  weights_ = std::move(w);
  gradient_ = std::move(g);
  return outcome;
}

int64_t Client::BeginStep() {
  EnsureNoStep("begin_step");
  if (weights_.span.empty()) throw py::value_error("begin_step: join first");
  const StepPlan plan = ValueOrThrow(session_->BeginStep());
  in_step_ = true;
  if (plan.batch_shards.size() != 1 ||
      plan.gradient.data() != gradient_.span.data()) {
    AbandonStep();
    ThrowIfError(absl::UnimplementedError(
        "a step of several batch shards (an elastic job's member covering "
        "absent ranks) is not available to Python workers"));
  }
  return plan.step;
}

void Client::GradientReady(int64_t begin, int64_t end) {
  if (!in_step_) throw py::value_error("gradient_ready: no step begun");
  py::gil_scoped_release release;
  session_->GradientReady(begin, end);
}

StepOutcome Client::FinishStep() {
  if (!in_step_) throw py::value_error("finish_step: no step begun");
  absl::StatusOr<StepOutcome> outcome;
  {
    py::gil_scoped_release release;
    outcome = session_->FinishStep();
  }
  in_step_ = false;
  return ValueOrThrow(std::move(outcome));
}

void Client::AbandonStep() {
  if (!in_step_) return;
  absl::Status abandoned;
  {
    py::gil_scoped_release release;
    abandoned = session_->AbandonStep();
  }
  in_step_ = false;
  ThrowIfError(abandoned);
}

std::vector<double> Client::Average(const std::string& name,
                                    const std::vector<double>& values,
                                    double timeout_s) {
  EnsureNoStep("average");
  absl::StatusOr<std::vector<double>> mean;
  {
    py::gil_scoped_release release;
    mean = session_->Average(name, values, absl::Seconds(timeout_s));
  }
  return ValueOrThrow(std::move(mean));
}

void Client::Leave(const std::string& reason, const std::string& detail) {
  EnsureNoStep("leave");
  LeaveNote note{LeaveReason::kFinished, detail};
  if (reason == "stopped") {
    note.reason = LeaveReason::kStopped;
  } else if (reason == "failed") {
    note.reason = LeaveReason::kFailed;
  } else if (reason != "finished") {
    throw py::value_error(
        absl::StrCat("leave: reason must be finished, stopped or failed, not '",
                     reason, "'"));
  }
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = session_->Leave(note);
  }
  ThrowIfError(status);
}

void Client::EnsureNoStep(const char* what) const {
  if (in_step_) {
    throw py::value_error(absl::StrCat(
        what, ": a step is under way; finish or abandon it first"));
  }
}

}  // namespace lockstep
