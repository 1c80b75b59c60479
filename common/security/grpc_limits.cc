#include "common/security/grpc_limits.h"

#include <grpc/grpc.h>
#include <grpcpp/resource_quota.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>

#include "absl/time/clock.h"

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

bool WaitForFreePort(const std::string& address, absl::Duration at_most) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return true;
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port == "0") return true;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* resolved = nullptr;
  if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints,
                  &resolved) != 0) {
    return true;
  }
  // As gRPC binds: SO_REUSEADDR, so only a listening socket is in the way.
  auto taken = [&] {
    for (const addrinfo* a = resolved; a != nullptr; a = a->ai_next) {
      const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
      if (fd < 0) continue;
      const int one = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      const bool in_use =
          bind(fd, a->ai_addr, a->ai_addrlen) != 0 && errno == EADDRINUSE;
      close(fd);
      if (in_use) return true;
    }
    return false;
  };
  const absl::Time deadline = absl::Now() + at_most;
  bool in_use = taken();
  while (in_use && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
    in_use = taken();
  }
  freeaddrinfo(resolved);
  return !in_use;
}

}  // namespace lockstep
