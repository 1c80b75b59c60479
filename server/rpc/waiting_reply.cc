#include "server/rpc/waiting_reply.h"

#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/rpc/grpc_status.h"
#include "common/rpc/wire_format.h"
#include "common/wire/wire_dtype_proto.h"

namespace lockstep {

// What the callback and the reactor share: whether the call is finished,
// and what to finish it with. The reactor and the response are touched
// only while `finished` is false, and they live until OnDone, which comes
// after the one Finish.
struct WaitingReply::Shared {
  absl::Mutex mu;
  bool finished ABSL_GUARDED_BY(mu) = false;
  ParameterServer* core;
  WireDType dtype;
  grpc::ServerUnaryReactor* reactor;
  grpc::ByteBuffer* response;
};

WaitingReply::WaitingReply(ParameterServer* core, WireDType dtype,
                           grpc::ByteBuffer* response, WaitingCalls* calls)
    : shared_(std::make_shared<Shared>()), calls_(calls) {
  shared_->core = core;
  shared_->dtype = dtype;
  shared_->reactor = this;
  shared_->response = response;
  calls_->waiting.fetch_add(1, std::memory_order_relaxed);
}

// fp32 replies send the published snapshot itself; bf16/fp16 ones send its
// encoding, made once per version and shared by every reply.
ChunkCallback WaitingReply::Answer() {
  return [shared = shared_](absl::StatusOr<ChunkSnapshot> snapshot) {
    absl::MutexLock lock(&shared->mu);
    if (shared->finished) return;  // The caller gave up; nothing to send.
    shared->finished = true;
    if (!snapshot.ok()) {
      shared->reactor->Finish(ToGrpcStatus(snapshot.status()));
      return;
    }
    std::shared_ptr<const void> owner;
    absl::string_view payload;
    if (shared->dtype == WireDType::kFloat32) {
      const std::vector<float>& values = *snapshot->values;
      payload = absl::string_view(reinterpret_cast<const char*>(values.data()),
                                  values.size() * sizeof(float));
      owner = snapshot->values;
    } else {
      std::shared_ptr<const std::string> encoded =
          snapshot->encoded->Get(shared->dtype, *snapshot->values);
      payload = *encoded;
      owner = std::move(encoded);
    }
    *shared->response = MakeWeightsReply(snapshot->version, snapshot->chunk,
                                         ToProtoDType(shared->dtype), payload,
                                         std::move(owner));
    shared->core->CountSent(static_cast<int64_t>(payload.size()));
    shared->reactor->Finish(grpc::Status::OK);
  };
}

void WaitingReply::OnCancel() {
  {
    absl::MutexLock lock(&shared_->mu);
    if (shared_->finished) return;
    shared_->finished = true;
  }
  calls_->cancelled.fetch_add(1, std::memory_order_relaxed);
  Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                      "the caller gave the call up while it waited"));
}

void WaitingReply::OnDone() {
  calls_->waiting.fetch_sub(1, std::memory_order_relaxed);
  delete this;
}

}  // namespace lockstep
