// The GRPC_TRACE allow-list that keeps bearer tokens out of gRPC's logs
// (declared in tls.h).
#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/security/tls.h"

namespace lockstep {

absl::Span<const absl::string_view> QuietGrpcTracers() {
  // gRPC 1.51's tracers that printed no token (see tls.h), and the one
  // that only lists the tracers.
  static constexpr absl::string_view kQuiet[] = {"list_tracers",
                                                 "stream_refcount",
                                                 "handshaker",
                                                 "connectivity_state",
                                                 "bdp_estimator",
                                                 "server_channel",
                                                 "queue_pluck",
                                                 "cq_refcount",
                                                 "pending_tags",
                                                 "op_failure",
                                                 "compression",
                                                 "security_connector_refcount",
                                                 "plugin_credentials",
                                                 "auth_context_refcount",
                                                 "grpc_authz_api",
                                                 "resource_quota",
                                                 "resolver_refcount",
                                                 "promise_pipe",
                                                 "lb_policy_refcount",
                                                 "timer_check",
                                                 "timer",
                                                 "executor",
                                                 "polling_api",
                                                 "fd_refcount",
                                                 "fd_trace",
                                                 "polling",
                                                 "closure",
                                                 "error_refcount",
                                                 "combiner",
                                                 "work_serializer",
                                                 "event_engine",
                                                 "channel_stack",
                                                 "inproc",
                                                 "flowctl",
                                                 "fault_injection_filter",
                                                 "subchannel_pool",
                                                 "subchannel_refcount",
                                                 "subchannel",
                                                 "dns_resolver",
                                                 "cares_resolver",
                                                 "cares_address_sorting",
                                                 "round_robin",
                                                 "pick_first",
                                                 "outlier_detection_lb",
                                                 "health_check_client",
                                                 "client_channel",
                                                 "client_idle_filter"};
  return kQuiet;
}

absl::Status CheckTraceKeepsTokens(const char* grpc_trace) {
  if (grpc_trace == nullptr) return absl::OkStatus();
  const absl::Span<const absl::string_view> quiet = QuietGrpcTracers();
  for (absl::string_view tracer : absl::StrSplit(grpc_trace, ',')) {
    tracer = absl::StripAsciiWhitespace(tracer);
    if (tracer.empty() || tracer[0] == '-') continue;  // Off, not on.
    if (std::find(quiet.begin(), quiet.end(), tracer) != quiet.end()) {
      continue;
    }
    return absl::FailedPreconditionError(absl::StrCat(
        "GRPC_TRACE=", grpc_trace, " turns on the \"", tracer,
        "\" tracer, which may log calls' bytes or metadata, the bearer token "
        "among them: while a token file is in use, unset GRPC_TRACE or turn "
        "on only tracers known to keep it out of the logs "
        "(docs/security.md lists them)"));
  }
  return absl::OkStatus();
}

}  // namespace lockstep
