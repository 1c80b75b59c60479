#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/security/tls.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce/gloo_all_reducer.h"
#include "worker/exchange/allreduce/ring_all_reducer.h"
// The one #if for NCCL; CMake defines it when it builds
// worker/exchange/allreduce/nccl.
#if LOCKSTEP_HAVE_NCCL
#include "worker/exchange/allreduce/nccl/nccl_all_reducer.h"
#endif

namespace lockstep {
namespace {

absl::Status ValidateOptions(const AllReduceOptions& o) {
  if (o.backend != "gloo" && o.backend != "grpc-ring" && o.backend != "nccl") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown all-reduce backend \"", o.backend,
                     "\" (want gloo, grpc-ring or nccl)"));
  }
  if (o.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("size must be at least 1, got ", o.size));
  }
  if (o.rank < 0 || o.rank >= o.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank must be in [0, ", o.size, "), got ", o.rank));
  }
  if (o.size > 1 && o.coordinator.empty()) {
    return absl::InvalidArgumentError(
        "a coordinator address is needed for more than one rank");
  }
  if (o.host.empty()) return absl::InvalidArgumentError("empty host");
  if (o.group.empty()) return absl::InvalidArgumentError("empty group");
  if (o.rendezvous_timeout <= absl::ZeroDuration() ||
      o.op_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("timeouts must be positive");
  }
  if (o.chunk_bytes != kAutoChunkBytes &&
      (o.chunk_bytes < 4 || o.chunk_bytes > (int64_t{1} << 30))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be auto (0) or in [4, 2^30], got ", o.chunk_bytes));
  }
  if (o.max_in_flight < 1 || o.max_in_flight > 64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_in_flight must be in [1, 64], got ", o.max_in_flight));
  }
  if (o.gpu < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpu must be non-negative, got ", o.gpu));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<AllReducer>> CreateAllReducer(
    const AllReduceOptions& given) {
  if (absl::Status s = ValidateOptions(given); !s.ok()) return s;
  const AllReduceOptions& options = given;
  // gloo's TCP pairs and NCCL's sockets are plaintext, like a server
  // without TLS: loopback only, unless --insecure.
  if (options.backend != "grpc-ring" && options.size > 1 &&
      !options.tls.insecure && !IsLoopbackAddress(options.host)) {
    return absl::FailedPreconditionError(
        absl::StrCat("the ", options.backend,
                     " all-reduce sends gradients in plaintext; "
                     "on ",
                     options.host,
                     " (not loopback) use grpc-ring with TLS, or "
                     "pass ",
                     options.tls.names.insecure, " on a trusted network"));
  }
  if (options.backend == "gloo") return GlooAllReducer::Create(options);
  if (options.backend == "grpc-ring") return RingAllReducer::Create(options);
#if LOCKSTEP_HAVE_NCCL
  return CreateNcclAllReducer(options);
#else
  return absl::FailedPreconditionError(
      "this build has no NCCL all-reduce (built without CUDA and NCCL, or "
      "with -DLOCKSTEP_NCCL=OFF)");
#endif
}

}  // namespace lockstep
