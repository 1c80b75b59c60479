#include "worker/exchange/ps/in_process_shard_transport.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"

namespace lockstep {
namespace {

struct InProcessPush final : ShardTransport::PreparedPush {
  PushArgs args;
  ShardTransport::ReplyCallback done;
};

// Hands `snapshot` to `done` encoded as `dtype`, as the gRPC service's
// replies carry it, and counts the bytes as sent.
void Reply(ParameterServer* server, WireDType dtype,
           const absl::StatusOr<ChunkSnapshot>& snapshot,
           const ShardTransport::ReplyCallback& done) {
  if (!snapshot.ok()) {
    done(snapshot.status(), absl::InternalError("no reply"));
    return;
  }
  std::shared_ptr<const std::string> encoded;
  absl::string_view payload;
  if (dtype == WireDType::kFloat32) {
    const std::vector<float>& values = *snapshot->values;
    payload = absl::string_view(reinterpret_cast<const char*>(values.data()),
                                values.size() * sizeof(float));
  } else {
    encoded = snapshot->encoded->Get(dtype, *snapshot->values);
    payload = *encoded;
  }
  server->CountSent(static_cast<int64_t>(payload.size()));
  done(absl::OkStatus(),
       WeightsPieces{snapshot->version, absl::MakeConstSpan(&payload, 1)});
}

}  // namespace

std::string InProcessShardTransport::Describe() const {
  return absl::StrCat("in-process shard ", server_->GetStatus().shard);
}

void InProcessShardTransport::Register(int rank,
                                       const ModelSignature& signature,
                                       absl::Time, ShardRegistration* reply,
                                       StatusCallback done) {
  absl::StatusOr<Registration> registration =
      server_->Register(rank, signature);
  if (registration.ok()) {
    reply->incarnation = registration->incarnation;
    reply->must_initialize = registration->must_initialize;
    reply->version = registration->version;
  }
  done(registration.status());
}

void InProcessShardTransport::Initialize(int rank, int64_t incarnation,
                                         int chunk,
                                         absl::Span<const float> weights,
                                         absl::Time, StatusCallback done) {
  const absl::string_view bytes(reinterpret_cast<const char*>(weights.data()),
                                weights.size() * sizeof(float));
  done(server_->Initialize(rank, incarnation, chunk, bytes).status());
}

void InProcessShardTransport::Pull(const PullArgs& args, ReplyCallback done) {
  server_->Pull(
      args.rank, args.incarnation, args.chunk, args.min_version, args.exact,
      [server = server_, dtype = args.dtype,
       done = std::move(done)](absl::StatusOr<ChunkSnapshot> snapshot) {
        Reply(server, dtype, snapshot, done);
      });
}

void InProcessShardTransport::Average(int rank, int64_t incarnation,
                                      int64_t round, const std::string& name,
                                      absl::Span<const double> values,
                                      absl::Time deadline,
                                      std::vector<double>* mean,
                                      StatusCallback done) {
  // Blocking, as over gRPC: the answer may come from another rank's call,
  // after this one gave up (the state outlives it).
  struct Answer {
    absl::Notification answered;
    absl::StatusOr<std::vector<double>> result;
  };
  auto answer = std::make_shared<Answer>();
  server_->Average(rank, incarnation, round, name,
                   {values.begin(), values.end()},
                   [answer](absl::StatusOr<std::vector<double>> result) {
                     answer->result = std::move(result);
                     answer->answered.Notify();
                   });
  if (!answer->answered.WaitForNotificationWithDeadline(deadline)) {
    return done(absl::DeadlineExceededError("average: deadline exceeded"));
  }
  if (answer->result.ok()) *mean = *answer->result;
  done(answer->result.status());
}

void InProcessShardTransport::Leave(int rank, int64_t incarnation,
                                    const LeaveNote& note, absl::Time,
                                    StatusCallback done) {
  done(server_->Leave(rank, incarnation, note));
}

std::unique_ptr<ShardTransport::PreparedPush>
InProcessShardTransport::PreparePush(const PushArgs& args) {
  auto push = std::make_unique<InProcessPush>();
  push->args = args;
  return push;
}

void InProcessShardTransport::StartPush(PreparedPush* prepared,
                                        ReplyCallback done) {
  auto* push = static_cast<InProcessPush*>(prepared);
  push->done = std::move(done);
  const PushArgs& args = push->args;
  server_->Push(
      args.rank, args.incarnation, args.step, args.chunk, args.dtype,
      args.payload,
      [server = server_, push](absl::StatusOr<ChunkSnapshot> s) {
        Reply(server, push->args.dtype, s, push->done);
      },
      args.slot);
}

}  // namespace lockstep
