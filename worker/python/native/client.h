// One Python worker's membership of a job: a PsClient and PsExchanger's join
// rules (worker/exchange/ps/ps_client.h, worker/exchange/ps_exchanger.h) behind
// the methods lockstep._native.Client offers. Every decision is theirs; this class only
// holds a step's buffers, releases the GIL while it waits, and registers
// again after a retryable failure with lockstep_worker's Rejoiner.
//
// Externally synchronized (Python's one training thread). Call with the GIL
// held; the methods that wait release it themselves.
#ifndef LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_
#define LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/model_signature.h"
#include "common/tls_options.h"
#include "worker/exchange/ps/ps_client.h"
#include "worker/exchange/ps_exchanger.h"
#include "worker/python/native/conversions.h"
#include "worker/exchange/rejoiner.h"

namespace lockstep {

// How a Client reaches its job.
struct ClientOptions {
  std::vector<std::string> servers;
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
};

// What a worker registers with (the model signature's parts, as Python
// hands them over).
struct JoinRequest {
  NamedShapes tensors;
  NamedShapes state_tensors;
  OptimizerConfig optimizer;
  int64_t chunk_bytes = kAutoChunkBytes;  // common/chunk_plan.h
  int num_workers = 1;
  int num_shards = 1;
  std::string sync = "sync";  // sync, async or ssp.
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
  // buffer defines version 0 when the job has none); returns the version.
  // `timeout_s` <= 0: no bound.
  int64_t Join(const JoinRequest& request, const pybind11::buffer& weights,
               double timeout_s);
  // A step: BeginStep, GradientReady for each range as it becomes final,
  // then FinishStep (or AbandonStep). The buffers are held until it ends.
  void BeginStep(int64_t step, const pybind11::buffer& gradient,
                 const pybind11::buffer& weights);
  void GradientReady(int64_t begin, int64_t end);
  // The version the step was answered with, and whether a retryable
  // failure made this worker register again (the weights buffer then holds
  // the version to go on from, and the step's gradient was dropped).
  std::pair<int64_t, bool> FinishStep();
  void AbandonStep();
  int64_t Pull(int64_t min_version, const pybind11::buffer& weights,
               bool exact);
  void Leave();

  StepTimings timings() const { return client_->step_timings(); }
  int push_window() const { return client_->push_window(); }
  bool in_step() const { return in_step_; }
  int64_t rejoins() const { return rejoiner_.rejoins(); }

 private:
  // Registers; rank 0 defines version 0 from what `weights` holds now (the
  // framework's own initial weights) when the job has none.
  absl::StatusOr<int64_t> JoinOnce(const ModelSignature& signature,
                                   absl::Span<float> weights,
                                   absl::Duration timeout);
  void EnsureNoStep(const char* what) const;
  void EndStep();

  std::unique_ptr<PsClient> client_;
  std::unique_ptr<PsExchanger> exchanger_;
  Rejoiner rejoiner_;
  ModelSignature signature_;  // The last join's.
  bool in_step_ = false;
  FloatBuffer gradient_;  // Held while in_step_.
  FloatBuffer weights_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PYTHON_NATIVE_CLIENT_H_
