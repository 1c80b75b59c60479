#include "worker/python/native/client.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/exit_codes.h"
#include "common/wire_codec.h"

namespace lockstep {
namespace {

namespace py = pybind11;

absl::StatusOr<SyncMode> ParseSync(const std::string& mode) {
  // The Python API names the mode; an empty name is not a choice there.
  if (mode.empty()) {
    return absl::InvalidArgumentError("sync must be sync, async or ssp");
  }
  return ParseSyncMode(mode);
}

absl::Duration Seconds(double s) {
  return s > 0 ? absl::Seconds(s) : absl::InfiniteDuration();
}

}  // namespace

Client::Client(ClientOptions o)
    : rejoiner_(absl::StrCat("lockstep worker ", o.rank), o.seed, o.rank,
                absl::Seconds(o.rejoin_timeout_s), "rejoin_timeout_s") {
  PsClientOptions options;
  options.servers = std::move(o.servers);
  options.wire_dtype = ValueOrThrow(ParseWireDType(o.wire_dtype));
  options.max_pushes_in_flight = o.push_window;
  options.push_thread = o.push_thread;
  options.connect_timeout = absl::Seconds(o.connect_timeout_s);
  options.rpc_timeout = absl::Seconds(o.rpc_timeout_s);
  options.step_timeout = absl::Seconds(o.step_timeout_s);
  options.tls = std::move(o.tls);  // Never the flags: this is a library.
  client_ = ValueOrThrow(PsClient::Create(options));
  exchanger_ = std::make_unique<PsExchanger>(client_.get(), o.rank);
}

Client::~Client() {
  // An unfinished step's pushes reference the buffers: end it first.
  if (in_step_) {
    py::gil_scoped_release release;
    exchanger_->AbandonStep();
  }
}

int64_t Client::Join(const JoinRequest& r, const py::buffer& weights,
                     double timeout_s) {
  EnsureNoStep("join");
  ModelSignature signature;
  signature.tensors = Tensors(r.tensors);
  signature.state_tensors = Tensors(r.state_tensors);
  signature.optimizer = r.optimizer;
  signature.chunk_bytes = r.chunk_bytes;
  signature.num_workers = r.num_workers;
  signature.num_shards = r.num_shards;
  signature.sync.mode = ValueOrThrow(ParseSync(r.sync));
  signature.sync.backup_workers = r.backup_workers;
  signature.sync.staleness = r.staleness;
  signature.total_steps = r.total_steps;
  FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
  const int64_t expect =
      signature.NumParameters() + signature.NumStateElements();
  if (static_cast<int64_t>(w.span.size()) != expect) {
    throw py::value_error(absl::StrCat("weights: the signature has ", expect,
                                       " values, the buffer ", w.span.size()));
  }
  absl::StatusOr<int64_t> version;
  {
    py::gil_scoped_release release;
    version = JoinOnce(signature, w.span, Seconds(timeout_s));
  }
  const int64_t joined = ValueOrThrow(std::move(version));
  signature_ = std::move(signature);
  rejoiner_.StepSucceeded();  // The rejoin deadline counts from here.
  return joined;
}

void Client::BeginStep(int64_t step, const py::buffer& gradient,
                       const py::buffer& weights) {
  EnsureNoStep("begin_step");
  FloatBuffer g = RequestFloats(gradient, /*writable=*/false, "gradient");
  FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
  ThrowIfError(exchanger_->BeginStep(step, g.span, w.span));
  gradient_ = std::move(g);
  weights_ = std::move(w);
  in_step_ = true;
}

void Client::GradientReady(int64_t begin, int64_t end) {
  if (!in_step_) throw py::value_error("gradient_ready: no step begun");
  py::gil_scoped_release release;
  exchanger_->GradientReady(begin, end);
}

std::pair<int64_t, bool> Client::FinishStep() {
  if (!in_step_) throw py::value_error("finish_step: no step begun");
  absl::StatusOr<int64_t> version;
  bool rejoined = false;
  {
    py::gil_scoped_release release;
    version = exchanger_->FinishStep();
    if (version.ok()) {
      rejoiner_.StepSucceeded();
    } else if (IsRetryable(version.status())) {
      // As lockstep_worker does: register again and go on from the version
      // the servers have; the data order follows the version.
      const absl::Status cause = version.status();
      if (absl::Status late = rejoiner_.CheckDeadline(cause); !late.ok()) {
        version = late;
      } else {
        const absl::Span<float> weights = weights_.span;
        version = rejoiner_.Rejoin(cause, [&](absl::Duration timeout) {
          return JoinOnce(signature_, weights, timeout);
        });
        rejoined = version.ok();
      }
    }
  }
  EndStep();
  return {ValueOrThrow(std::move(version)), rejoined};
}

void Client::AbandonStep() {
  if (!in_step_) return;
  {
    py::gil_scoped_release release;
    exchanger_->AbandonStep();
  }
  EndStep();
}

int64_t Client::Pull(int64_t min_version, const py::buffer& weights,
                     bool exact) {
  EnsureNoStep("pull");
  FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
  absl::StatusOr<int64_t> version;
  {
    py::gil_scoped_release release;
    version = client_->Pull(min_version, w.span, exact);
  }
  return ValueOrThrow(std::move(version));
}

void Client::Leave() {
  EnsureNoStep("leave");
  absl::Status status;
  {
    py::gil_scoped_release release;
    status = exchanger_->Leave();
  }
  ThrowIfError(status);
}

absl::StatusOr<int64_t> Client::JoinOnce(const ModelSignature& signature,
                                         absl::Span<float> weights,
                                         absl::Duration timeout) {
  auto initial = [weights] {
    return std::vector<float>(weights.begin(), weights.end());
  };
  return exchanger_->Join(signature, initial, weights, timeout);
}

void Client::EnsureNoStep(const char* what) const {
  if (in_step_) {
    throw py::value_error(
        absl::StrCat(what, ": a step is under way; finish or abandon it first"));
  }
}

void Client::EndStep() {
  in_step_ = false;
  gradient_ = FloatBuffer();
  weights_ = FloatBuffer();
}

}  // namespace lockstep
