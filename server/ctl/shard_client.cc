#include "server/ctl/shard_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/model/signature_proto.h"
#include "common/rpc/grpc_status.h"
#include "lockstep/v1/lockstep.grpc.pb.h"

namespace lockstep {
namespace {

// The RPC's error, naming the shard, with `hint` where the connection was
// closed rather than refused (a TLS server met without TLS or without a
// client certificate says no more than "Socket closed"); the code is kept.
absl::Status Describe(const grpc::Status& status, const std::string& address,
                      absl::string_view rpc, absl::string_view hint) {
  const absl::Status s = FromGrpcStatus(status);
  const bool closed = s.code() == absl::StatusCode::kUnavailable &&
                      (absl::StrContains(s.message(), "Socket closed") ||
                       absl::StrContains(s.message(), "andshake") ||
                       absl::StrContains(s.message(), "Connection reset"));
  return absl::Status(s.code(),
                      absl::StrCat(rpc, " on ", address, ": ",
                                   absl::StatusCodeToString(s.code()), ": ",
                                   s.message(), closed ? hint : ""));
}

// What Describe adds for a closed connection, from what `tls` lacks.
std::string TlsHint(const TlsOptions& tls) {
  if (tls.ca_file.empty()) {
    return " (the server may require TLS: give --tls_ca, and --tls_cert and "
           "--tls_key if it asks for a client certificate)";
  }
  if (tls.cert_file.empty()) {
    return " (the server may require a client certificate: give --tls_cert "
           "and --tls_key)";
  }
  return "";
}

}  // namespace

std::string DescribeModel(const v1::ModelSignature& signature) {
  int64_t parameters = 0;
  for (const v1::TensorSpec& t : signature.tensors()) {
    int64_t n = 1;
    for (int64_t d : t.shape()) n *= d;
    parameters += n;
  }
  const absl::StatusOr<ModelSignature> read = SignatureFromProto(signature);
  const std::string mode =
      read.ok() ? SyncModeName(read->sync.mode) : signature.sync().mode();
  if (read.ok() && read->sync.SemiSynchronous()) {
    // LocalSGD or DiLoCo: the optimizer is the outer one, a version a round.
    return absl::StrCat(parameters, " parameters in ", signature.tensors_size(),
                        " tensors, ", read->optimizer.name, " on rounds of ",
                        read->sync.local_steps, " local steps of ",
                        read->inner_optimizer.name, ", total ",
                        signature.total_steps(), " rounds");
  }
  return absl::StrCat(parameters, " parameters in ", signature.tensors_size(),
                      " tensors, ", signature.optimizer().name(), ", ", mode,
                      ", total ", signature.total_steps(), " steps");
}

absl::StatusOr<std::unique_ptr<ShardClient>> ShardClient::Create(
    const std::string& address, const TlsOptions& tls) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(address, tls);
  if (!channel.ok()) return channel.status();
  return std::unique_ptr<ShardClient>(
      new ShardClient(address, std::move(*channel), TlsHint(tls)));
}

ShardClient::ShardClient(std::string address,
                         std::shared_ptr<grpc::Channel> channel,
                         std::string tls_hint)
    : address_(std::move(address)),
      channel_(std::move(channel)),
      tls_hint_(std::move(tls_hint)) {}

ShardClient::~ShardClient() = default;

absl::StatusOr<ShardStatus> ShardClient::GetStatus(absl::Duration timeout,
                                                   absl::Duration wait) {
  std::unique_ptr<v1::ParameterServer::Stub> stub =
      v1::ParameterServer::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + wait + timeout));
  v1::StatusRequest request;
  request.set_wait_ms(absl::ToInt64Milliseconds(wait));
  v1::StatusResponse r;
  const grpc::Status status = stub->GetStatus(&context, request, &r);
  if (!status.ok()) return Describe(status, address_, "GetStatus", tls_hint_);
  ShardStatus s;
  s.shard = r.shard();
  s.num_shards = r.num_shards();
  s.version = r.version();
  s.num_workers = r.num_workers();
  s.num_chunks = r.num_chunks();
  s.registered_ranks.assign(r.registered_ranks().begin(),
                            r.registered_ranks().end());
  s.pushed_ranks.assign(r.pushed_ranks().begin(), r.pushed_ranks().end());
  s.finished_ranks.assign(r.finished_ranks().begin(),
                          r.finished_ranks().end());
  // Servers from before WorkerActivity send no time: use ours.
  s.server_time = r.server_time_unix_micros() > 0
                      ? absl::FromUnixMicros(r.server_time_unix_micros())
                      : absl::Now();
  for (const v1::WorkerActivity& w : r.workers()) {
    ShardStatus::Worker worker;
    worker.rank = w.rank();
    if (w.last_contact_unix_micros() > 0) {
      worker.last_contact = absl::FromUnixMicros(w.last_contact_unix_micros());
    }
    worker.last_step = w.last_step();
    worker.last_step_seconds = w.last_step_seconds();
    const v1::StepWindow& win = w.window();
    RankTiming& t = worker.timing;
    t.rank = w.rank();
    t.late_steps = win.late_steps();
    t.lateness = absl::Seconds(win.lateness_seconds());
    t.timed_steps = win.timed_steps();
    t.step_time = absl::Seconds(win.step_seconds());
    t.reports = win.reports();
    t.input = absl::Seconds(win.input_seconds());
    t.compute = absl::Seconds(win.compute_seconds());
    t.push = absl::Seconds(win.push_seconds());
    t.wait = absl::Seconds(win.wait_seconds());
    s.workers.push_back(worker);
  }
  if (r.signature().tensors_size() > 0) {
    s.model = DescribeModel(r.signature());
    const absl::StatusOr<ModelSignature> read = SignatureFromProto(r.signature());
    s.synchronous = read.ok() && read->sync.mode == SyncMode::kSync;
  }
  const v1::ServerCounters& c = r.counters();
  s.pushes_accepted = c.pushes_accepted();
  s.pushes_refused = c.pushes_refused();
  s.pushes_dropped_late = c.pushes_dropped_late();
  s.waits_cancelled = c.waits_cancelled();
  s.bytes_received = c.bytes_received();
  s.bytes_sent = c.bytes_sent();
  s.pushes_refused_by_code.insert(c.pushes_refused_by_code().begin(),
                                  c.pushes_refused_by_code().end());
  return s;
}

absl::StatusOr<HealthStatus> ShardClient::Health(absl::Duration timeout) {
  absl::StatusOr<HealthStatus> health = CheckHealth(channel_, "", timeout);
  if (!health.ok()) {
    return absl::Status(health.status().code(),
                        absl::StrCat("health check on ", address_, ": ",
                                     health.status().message()));
  }
  return health;
}

absl::StatusOr<ShardClient::Saved> ShardClient::SaveCheckpoint(
    absl::Duration timeout) {
  std::unique_ptr<v1::ParameterServer::Stub> stub =
      v1::ParameterServer::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  v1::SaveCheckpointRequest request;
  v1::SaveCheckpointResponse response;
  const grpc::Status status =
      stub->SaveCheckpoint(&context, request, &response);
  if (!status.ok())
    return Describe(status, address_, "SaveCheckpoint", tls_hint_);
  return Saved{response.path(), response.weights_file(), response.version()};
}

}  // namespace lockstep
