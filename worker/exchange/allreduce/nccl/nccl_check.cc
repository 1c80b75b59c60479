#include "worker/exchange/allreduce/nccl/nccl_check.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace lockstep {
namespace nccl_internal {
namespace {

// __FILE__ is an absolute path under CMake; keep it from "worker/" on.
const char* ShortFile(const char* file) {
  const char* p = std::strstr(file, "worker/exchange/allreduce/");
  return p != nullptr ? p : file;
}

absl::StatusCode CodeOf(ncclResult_t result) {
  switch (result) {
    case ncclSystemError:
    case ncclRemoteError:
      return absl::StatusCode::kUnavailable;
    case ncclInvalidArgument:
      return absl::StatusCode::kInvalidArgument;
    case ncclInvalidUsage:
      return absl::StatusCode::kFailedPrecondition;
    default:
      return absl::StatusCode::kInternal;
  }
}

}  // namespace

absl::Status ToStatus(ncclResult_t result, const char* expr, const char* file,
                      int line) {
  if (result == ncclSuccess || result == ncclInProgress) {
    return absl::OkStatus();
  }
  const char* last = ncclGetLastError(nullptr);
  return absl::Status(
      CodeOf(result),
      absl::StrFormat("%s failed: %s (%s) at %s:%d", expr,
                      ncclGetErrorString(result),
                      last != nullptr && *last != '\0' ? last : "no detail",
                      ShortFile(file), line));
}

}  // namespace nccl_internal
}  // namespace lockstep
