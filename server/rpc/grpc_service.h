// The gRPC face of a ParameterServer: a thin adapter over the callback API.
//
// Each handler converts the request, calls the core and returns a reactor at
// once; pushes and pulls that must wait for the barrier are finished later
// by the core's callback, so no gRPC thread ever blocks on a barrier.
// Push and Pull are "raw" methods: their tensors are read from and written
// to gRPC's byte buffers in place (common/rpc/wire_format.h) rather than copied
// through protobuf objects. Protobuf types stop here. Every handler first
// asks the Authorizer (common/security/authorizer.h) whether the caller may
// make the call, and Register checks the signature against SignatureLimits
// before the core allocates anything for it. Thread-safe (the core is).
#ifndef LOCKSTEP_SERVER_RPC_GRPC_SERVICE_H_
#define LOCKSTEP_SERVER_RPC_GRPC_SERVICE_H_

#include <atomic>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/base/serial_executor.h"
#include "common/model/signature_limits.h"
#include "common/security/authorizer.h"
#include "lockstep/v1/lockstep.grpc.pb.h"
#include "server/core/parameter_server.h"
#include "server/rpc/replication_service.h"
#include "server/rpc/status_waits.h"
#include "server/rpc/waiting_reply.h"

namespace lockstep {

using ParameterServerServiceBase =
    v1::ParameterServer::WithCallbackMethod_Register<
        v1::ParameterServer::WithCallbackMethod_Initialize<
            v1::ParameterServer::WithRawCallbackMethod_Push<
                v1::ParameterServer::WithRawCallbackMethod_Pull<
                    v1::ParameterServer::WithCallbackMethod_Leave<
                        v1::ParameterServer::WithCallbackMethod_Average<
                            v1::ParameterServer::WithCallbackMethod_GetStatus<
                                v1::ParameterServer::
                                    WithCallbackMethod_SaveCheckpoint<
                                        v1::ParameterServer::
                                            WithCallbackMethod_StepBack<
                                                v1::ParameterServer::
                                                    Service>>>>>>>>>;

class ParameterServerService final : public ParameterServerServiceBase {
 public:
  // What SaveCheckpoint wrote: a checkpoint, the weights file, or both.
  struct Saved {
    std::string checkpoint;    // Empty: none.
    std::string weights_file;  // Empty: none.
    int64_t version = 0;
  };
  // Writes them now.
  using SaveCheckpointFn = std::function<absl::StatusOr<Saved>()>;

  // The shard's checkpoints (with a checkpoint directory): the versions
  // Register's answer lists, and a step back to one of them (the daemon
  // reads the file and calls ParameterServer::StepBack).
  struct Checkpoints {
    std::function<std::vector<int64_t>()> versions;
    std::function<absl::StatusOr<int64_t>(int rank, int64_t incarnation,
                                          int64_t from, int64_t to)>
        step_back;
  };

  // SaveCheckpoint requests that may wait while one is written; more are
  // refused with RESOURCE_EXHAUSTED.
  static constexpr int kMaxWaitingSaves = 4;

  // `core` is not owned and must outlive the service. Without
  // `save_checkpoint`, SaveCheckpoint answers FAILED_PRECONDITION; with it,
  // the writes run one at a time on a thread the service owns (see
  // StopSaving), and a shard that owns no chunk answers at once that it
  // saved nothing (version -1).
  // `authorizer` (not owned; null: every caller may call everything) must
  // outlive the service too.
  explicit ParameterServerService(ParameterServer* core,
                                  SaveCheckpointFn save_checkpoint = nullptr,
                                  const Authorizer* authorizer = nullptr,
                                  SignatureLimits limits = SignatureLimits())
      : core_(core),
        save_checkpoint_(std::move(save_checkpoint)),
        authorizer_(authorizer),
        limits_(limits),
        saves_(kMaxWaitingSaves) {}

  grpc::ServerUnaryReactor* Register(grpc::CallbackServerContext* context,
                                     const v1::RegisterRequest* request,
                                     v1::RegisterResponse* response) override;
  grpc::ServerUnaryReactor* Initialize(
      grpc::CallbackServerContext* context,
      const v1::InitializeRequest* request,
      v1::InitializeResponse* response) override;
  grpc::ServerUnaryReactor* Push(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Pull(grpc::CallbackServerContext* context,
                                 const grpc::ByteBuffer* request,
                                 grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const v1::LeaveRequest* request,
                                  v1::LeaveResponse* response) override;
  grpc::ServerUnaryReactor* Average(grpc::CallbackServerContext* context,
                                    const v1::AverageRequest* request,
                                    v1::AverageResponse* response) override;
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::StatusRequest* request,
                                      v1::StatusResponse* response) override;
  grpc::ServerUnaryReactor* SaveCheckpoint(
      grpc::CallbackServerContext* context,
      const v1::SaveCheckpointRequest* request,
      v1::SaveCheckpointResponse* response) override;
  // Runs on the thread of the saves, after the ones taken before it.
  grpc::ServerUnaryReactor* StepBack(grpc::CallbackServerContext* context,
                                     const v1::StepBackRequest* request,
                                     v1::StepBackResponse* response) override;

  // Set once, before the server takes calls. Without it Register lists no
  // checkpoints and StepBack answers FAILED_PRECONDITION.
  void SetCheckpoints(Checkpoints checkpoints) {
    checkpoints_ = std::move(checkpoints);
  }

  // Holds Register calls, answering them once OpenRegistration() runs, so
  // that a server can listen (and answer health checks and GetStatus) while
  // it restores a checkpoint, which must come before any registration.
  // Registration is open unless held. Held calls run on the caller of
  // OpenRegistration().
  void HoldRegistration();
  // While registration is held, Register calls are answered UNAVAILABLE
  // with `why` rather than held (empty: held again), those held included.
  // A standby whose primary answers (or that has no state to take over
  // with) refuses them so, and a worker that named the standby first goes
  // on to the primary at once.
  void RefuseHeldRegistrations(std::string why);
  // Pushes' and pulls' answers go through `gate` (not owned; null: none)
  // from now on: a primary's standby must hold their version first.
  void SetReplyGate(ReplyGate* gate) { gate_.store(gate); }
  void OpenRegistration();

  // Finishes the SaveCheckpoint requests taken (the one being written and
  // those waiting), then answers new ones UNAVAILABLE. Call it before the
  // gRPC server shuts down: once it returns, no request's thread touches
  // the service or the server. The destructor calls it too.
  // SaveCheckpoint requests taken and not yet being written.
  int SavesWaiting() { return saves_.waiting(); }

  void StopSaving() {
    saving_stopped_ = true;
    saves_.Shutdown();
  }

  // Answers every long-polled GetStatus call with the status of now, and
  // later ones at once (status_waits.h); waits up to `grace` for a watcher
  // that is between two calls. Call it once the job has ended, before the
  // gRPC server shuts down.
  void AnswerStatusWaits(absl::Duration grace) { status_waits_.Close(grace); }

 private:
  // Answers a Register call (the reactor's Finish included).
  void DoRegister(int rank, const ModelSignature& signature,
                  v1::RegisterResponse* response,
                  grpc::ServerUnaryReactor* reactor);

  ParameterServer* const core_;  // Not owned.
  const SaveCheckpointFn save_checkpoint_;
  Checkpoints checkpoints_;
  const Authorizer* const authorizer_;  // Not owned; may be null.
  const SignatureLimits limits_;
  absl::Mutex gate_mu_;
  bool registration_held_ ABSL_GUARDED_BY(gate_mu_) = false;
  std::string held_refusal_ ABSL_GUARDED_BY(gate_mu_);
  struct HeldRegistration {
    std::function<void()> run;
    grpc::ServerUnaryReactor* reactor;  // To refuse it instead.
  };
  std::vector<HeldRegistration> held_ ABSL_GUARDED_BY(gate_mu_);
  // `reply` through the gate, when one is set.
  ChunkCallback Gated(ChunkCallback reply) {
    ReplyGate* gate = gate_.load();
    return gate == nullptr ? reply : gate->Wrap(std::move(reply));
  }

  WaitingCalls waiting_calls_;  // Pushes and pulls (waiting_reply.h).
  std::atomic<bool> saving_stopped_{false};
  std::atomic<ReplyGate*> gate_{nullptr};  // Not owned.
  StatusWaits status_waits_;
  // Last, so that it is stopped (its thread joined) before the rest goes.
  SerialExecutor saves_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_RPC_GRPC_SERVICE_H_
