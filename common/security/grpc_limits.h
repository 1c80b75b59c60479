// Resource limits for every Lockstep gRPC server, so that no peer -- slow,
// buggy or hostile -- can hold unbounded memory, streams or connections.
// Message sizes are set by each server from what it expects to receive
// (MaxRequestBytes); the rest is here.
#ifndef LOCKSTEP_COMMON_SECURITY_GRPC_LIMITS_H_
#define LOCKSTEP_COMMON_SECURITY_GRPC_LIMITS_H_

#include <grpcpp/server_builder.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"

namespace lockstep {

// Room for a request's fields around its largest tensor payload.
inline constexpr int64_t kMessageMarginBytes = int64_t{64} << 10;

// The largest request a server accepts when payloads are at most
// `chunk_bytes`: larger messages are refused (RESOURCE_EXHAUSTED). gRPC
// 1.51 receives a whole message before it compares (grpc/grpc#43012); the
// server's memory quota is what bounds that.
int MaxRequestBytes(int64_t chunk_bytes);

struct ServerLimits {
  // Concurrent calls per connection (HTTP/2 MAX_CONCURRENT_STREAMS). A
  // worker has about one push per chunk of its shard in flight.
  int max_concurrent_streams = 1024;
  // A connection without calls for this long is closed. Zero: never.
  absl::Duration max_connection_idle = absl::Minutes(10);
  // Every connection is closed (GOAWAY) after about this long, so that
  // clients re-handshake with rotated certificates; calls in flight get
  // max_connection_age_grace to finish. Zero: never.
  absl::Duration max_connection_age = absl::Hours(1);
  absl::Duration max_connection_age_grace = absl::Minutes(10);
  // Clients pinging more often than this without data are disconnected
  // after two strikes (keepalive enforcement).
  absl::Duration min_ping_interval = absl::Seconds(10);
  // The server pings an idle client this often to find dead connections,
  // and drops one that does not answer within keepalive_timeout.
  absl::Duration keepalive_time = absl::Minutes(2);
  absl::Duration keepalive_timeout = absl::Seconds(20);
  // Request metadata (headers) per call.
  int max_metadata_bytes = 16 << 10;
  // gRPC's memory quota for the whole server: under pressure gRPC shrinks
  // its buffers and cancels calls (RESOURCE_EXHAUSTED) rather than grow.
  // This is what bounds the memory an oversized request costs: gRPC 1.51
  // buffers a whole message before it compares it with the size limit
  // (grpc/grpc#43012). Zero: no quota.
  int64_t max_memory_bytes = 0;
};

// Sets `limits` on `builder` as channel arguments.
void ApplyServerLimits(const ServerLimits& limits,
                       grpc::ServerBuilder* builder);

// Refuses to share the listening port. gRPC sets SO_REUSEPORT by default
// on Linux, so a second server started on a port in use would bind it as
// well and take part of the connections: a worker restarted against a
// replacement server could register with the old one, or with another
// job's. With this the second server fails to listen instead.
void ListenExclusively(grpc::ServerBuilder* builder);

// Waits until the port of `address` ("host:port", "[v6]:port") could be
// bound, for at most `at_most`: a process killed a moment ago holds its
// listening socket until it is gone, which takes milliseconds after kill()
// returns. Returns false if the port was still taken at the end (true for
// port 0 and for what it cannot resolve: the bind itself will tell).
bool WaitForFreePort(const std::string& address, absl::Duration at_most);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_GRPC_LIMITS_H_
