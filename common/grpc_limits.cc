#include "common/grpc_limits.h"

#include <grpc/grpc.h>
#include <grpcpp/resource_quota.h>

#include <algorithm>
#include <climits>

namespace lockstep {
namespace {

int Milliseconds(absl::Duration d) {
  return static_cast<int>(
      std::clamp<int64_t>(absl::ToInt64Milliseconds(d), 0, INT_MAX));
}

}  // namespace

int MaxRequestBytes(int64_t chunk_bytes) {
  return static_cast<int>(std::clamp<int64_t>(chunk_bytes + kMessageMarginBytes,
                                              kMessageMarginBytes, INT_MAX));
}

void ApplyServerLimits(const ServerLimits& limits,
                       grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              limits.max_concurrent_streams);
  if (limits.max_connection_idle > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                                Milliseconds(limits.max_connection_idle));
  }
  if (limits.max_connection_age > absl::ZeroDuration()) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                                Milliseconds(limits.max_connection_age));
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                                Milliseconds(limits.max_connection_age_grace));
  }
  builder->AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
      Milliseconds(limits.min_ping_interval));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 2);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                              Milliseconds(limits.keepalive_time));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              Milliseconds(limits.keepalive_timeout));
  builder->AddChannelArgument(GRPC_ARG_MAX_METADATA_SIZE,
                              limits.max_metadata_bytes);
  if (limits.max_memory_bytes > 0) {
    grpc::ResourceQuota quota("lockstep_server");
    quota.Resize(static_cast<size_t>(limits.max_memory_bytes));
    builder->SetResourceQuota(quota);  // The builder keeps a reference.
  }
}

void ListenExclusively(grpc::ServerBuilder* builder) {
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
}

}  // namespace lockstep
