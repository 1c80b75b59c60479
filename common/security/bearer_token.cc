#include "common/security/bearer_token.h"

#include <grpc/grpc.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/client_interceptor.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// Adds "authorization: Bearer <token>" to every call. The header value is
// the only copy of the token the client keeps.
class BearerTokenPlugin final : public grpc::MetadataCredentialsPlugin {
 public:
  explicit BearerTokenPlugin(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}

  bool IsBlocking() const override { return false; }
  const char* GetType() const override { return "lockstep.bearer"; }
  grpc::Status GetMetadata(
      grpc::string_ref service_url, grpc::string_ref method_name,
      const grpc::AuthContext& channel_auth_context,
      std::multimap<grpc::string, grpc::string>* metadata) override {
    metadata->emplace("authorization", header_);
    return grpc::Status::OK;
  }
  grpc::string DebugString() override {
    return "lockstep bearer token (withheld)";
  }

 private:
  const std::string header_;
};

// The same header on a plaintext channel, where gRPC sends no call
// credentials: added to every call's initial metadata. MakeChannel allows
// it on loopback or with --insecure only.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(std::shared_ptr<const std::string> header)
      : header_(std::move(header)) {}

  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", *header_);
    }
    methods->Proceed();
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(std::make_shared<const std::string>(
            absl::StrCat("Bearer ", token))) {}

  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo* info) override {
    return new BearerTokenInterceptor(header_);  // gRPC owns it.
  }

 private:
  const std::shared_ptr<const std::string> header_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::Channel>> ChannelWithToken(
    const std::string& target,
    std::shared_ptr<grpc::ChannelCredentials> credentials,
    const grpc::ChannelArguments& args, bool tls, std::string token) {
  if (!tls) {
    std::vector<
        std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
        interceptors;
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(token));
    std::fill(token.begin(), token.end(), '\0');
    return grpc::experimental::CreateCustomChannelWithInterceptors(
        target, credentials, args, std::move(interceptors));
  }
  // Call credentials: gRPC itself refuses to send them over a channel
  // less secure than privacy and integrity.
  std::shared_ptr<grpc::CallCredentials> call =
      grpc::experimental::MetadataCredentialsFromPlugin(
          std::make_unique<BearerTokenPlugin>(token),
          GRPC_PRIVACY_AND_INTEGRITY);
  std::fill(token.begin(), token.end(), '\0');
  credentials = grpc::CompositeChannelCredentials(credentials, call);
  if (credentials == nullptr) {
    return absl::InternalError(
        "gRPC could not combine the channel and token credentials");
  }
  return grpc::CreateCustomChannel(target, credentials, args);
}

}  // namespace lockstep
