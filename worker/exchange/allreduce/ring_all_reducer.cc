#include "worker/exchange/allreduce/ring_all_reducer.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>

#include "absl/memory/memory.h"
#include "common/base/status_macros.h"
#include "common/security/tls.h"

namespace lockstep {
namespace {

// A session id that tells this reducer's chunks from those of an earlier
// reducer of the same rank; never 0, which means "none".
uint64_t NewSession() {
  std::random_device device;
  uint64_t session = 0;
  while (session == 0) {
    session = (uint64_t{device()} << 32) ^ uint64_t { device() };
  }
  return session;
}

}  // namespace

absl::StatusOr<std::unique_ptr<AllReducer>> RingAllReducer::Create(
    const AllReduceOptions& options) {
  std::unique_ptr<Authorizer> authorizer;
  if (options.size > 1) {
    TlsOptions tls = options.tls;
    // Mutual TLS: the ring takes chunks only from its peers, which present
    // a certificate of this worker's name (not, say, the admin's), unless
    // --worker_identities names them.
    if (tls.ServerTls() && tls.ClientTls() && tls.worker_identities.empty()) {
      ASSIGN_OR_RETURN(
          std::string name,
          CertificateCommonName(tls.names.cert_file, tls.cert_file));
      if (!name.empty()) tls.worker_identities = {name};
    }
    ASSIGN_OR_RETURN(authorizer, Authorizer::Create(tls));
  }
  auto reducer = absl::WrapUnique(new RingAllReducer(options));
  if (options.size > 1)
    RETURN_IF_ERROR(reducer->Connect(std::move(authorizer)));
  return reducer;
}

RingAllReducer::RingAllReducer(const AllReduceOptions& options)
    : options_(options),
      pipeline_(std::make_unique<RingPipeline>(options, NewSession())) {}

RingAllReducer::~RingAllReducer() {
  // Chunks that reach the service from now on, or wait in the pipeline, are
  // refused before the server stops (the connection's destructor).
  pipeline_->Close();
  connection_.reset();
}

absl::Status RingAllReducer::Connect(std::unique_ptr<Authorizer> authorizer) {
  connection_ = std::make_unique<RingConnection>(
      options_, pipeline_->session(), pipeline_.get(), std::move(authorizer));
  RETURN_IF_ERROR(connection_->Start());
  pipeline_->Connect(connection_.get(), connection_->left_session());
  return absl::OkStatus();
}

absl::Status RingAllReducer::AllReduceSum(absl::Span<float> data) {
  return pipeline_->AllReduceSum(data);
}

}  // namespace lockstep
