// One Python worker's step session (worker/exchange/step_session.h) behind
// the methods lockstep._native.Client offers: the same session, rules and
// recovery lockstep_worker's trainer drives. This class only holds the
// buffers Python lends, converts arguments and releases the GIL while the
// session waits; every decision (the next step, rejoining, the sync mode's
// rules) is the session's.
//
// Externally synchronized (Python's one training thread). Call with the GIL
// held; the methods that wait release it themselves.
#ifndef LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_
#define LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/model/model_signature.h"
#include "common/security/tls_options.h"
#include "worker/exchange/step_session.h"
#include "worker/python/native/conversions.h"

namespace lockstep {

// How a Client reaches its job.
struct ClientOptions {
  std::vector<std::string> servers;
  // Empty, or each shard's standby (lockstep_server --standby_of).
  std::vector<std::string> standby_servers;
  int rank = 0;
  std::string wire_dtype = "fp32";
  int push_window = kAutoPushWindow;
  bool push_thread = false;
  double connect_timeout_s = 60;
  double rpc_timeout_s = 60;
  double step_timeout_s = 300;
  double rejoin_timeout_s = 300;
  uint64_t seed = 42;  // The rejoin jitter's.
  TlsOptions tls;
  // "localsgd" or "diloco" (rounds of local_steps steps of the job's
  // optimizer, then the servers' outer one); empty: every step.
  std::string rounds;
  int local_steps = 0;
  std::optional<double> outer_lr;  // Unset: the mode's default.
  std::optional<double> outer_momentum;
  // Rounds: where the inner optimizer's state is saved for a replacement
  // (StepSessionOptions::inner_state_dir); empty: nowhere.
  std::string inner_state_dir;
};

// What a worker registers with (the model signature's parts, as Python
// hands them over).
struct JoinRequest {
  NamedShapes tensors;
  NamedShapes state_tensors;
  OptimizerConfig optimizer;
  int64_t chunk_bytes = kAutoChunkBytes;  // common/model/chunk_plan.h
  int num_workers = 1;
  int num_shards = 1;
  std::string sync = "sync";  // One of SyncModeNames().
  int backup_workers = 0;
  int staleness = 0;
  int64_t total_steps = 0;
};

class Client final {
 public:
  // Throws StatusError for bad settings (INVALID_ARGUMENT).
  explicit Client(ClientOptions options);
  ~Client();

  // Registers and pulls the version to start from into `weights` (rank 0's
  // buffer defines version 0 when the job has none); returns where that
  // left this worker. Both buffers are held for the client's life: every
  // step's gradient is read from `gradient`, every version lands in
  // `weights`. `timeout_s` <= 0: no bound.
  StepOutcome Join(const JoinRequest& request, const pybind11::buffer& weights,
                   const pybind11::buffer& gradient, double timeout_s);
  // A step: BeginStep (returns the step to compute), GradientReady for
  // each range as it becomes final, then FinishStep (or AbandonStep).
  int64_t BeginStep();
  void GradientReady(int64_t begin, int64_t end);
  StepOutcome FinishStep();
  void AbandonStep();
  // The mean of `values` over the workers (StepSession::Average).
  std::vector<double> Average(const std::string& name,
                              const std::vector<double>& values,
                              double timeout_s);
  // `reason`: finished, stopped or failed (common/base/leave_note.h).
  void Leave(const std::string& reason, const std::string& detail);

  StepTimings timings() const { return session_->step_timings(); }
  int push_window() const { return session_->push_window(); }
  bool in_step() const { return in_step_; }
  int64_t rejoins() const { return session_->rejoins(); }

 private:
  void EnsureNoStep(const char* what) const;

  std::unique_ptr<StepSession> session_;
  bool in_step_ = false;
  FloatBuffer weights_;  // Held from Join on.
  FloatBuffer gradient_;
};

// Adds StepOutcome and Client to the module (client_bindings.cc).
void BindClient(pybind11::module_& m);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_
