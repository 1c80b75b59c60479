// How a client channel carries the bearer token (common/security/tls.h's
// MakeChannel): as call credentials over TLS, which gRPC sends only with
// privacy and integrity, or by an interceptor that adds the header to every
// call over plaintext. For common/security/tls.cc; the only copy of the token kept
// is the header value.
#ifndef LOCKSTEP_COMMON_SECURITY_BEARER_TOKEN_H_
#define LOCKSTEP_COMMON_SECURITY_BEARER_TOKEN_H_

#include <grpcpp/channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace lockstep {

// A channel to `target` over `credentials` (TLS when `tls`) that sends
// "authorization: Bearer <token>" with every call. Overwrites `token`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelWithToken(
    const std::string& target,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const grpc::ChannelArguments& args, bool tls, std::string token);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_SECURITY_BEARER_TOKEN_H_
