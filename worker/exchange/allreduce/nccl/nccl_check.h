// The one place where NCCL results become absl::Status.
//
// Every NCCL call in worker/exchange/allreduce/nccl goes through
// NCCL_RETURN_IF_ERROR, which names the failed expression, NCCL's error and its last message, and
// the file and line, in the manner of nccl-tests' NCCLCHECK:
//
//   NCCL_RETURN_IF_ERROR(ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum,
//                                      comm, stream));
//
// CUDA runtime calls use worker/device/cuda/cuda_check.h.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_CHECK_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_CHECK_H_

#include <nccl.h>

#include "absl/status/status.h"

namespace lockstep {
namespace nccl_internal {

// OK for ncclSuccess, and for ncclInProgress (a non-blocking communicator's
// call was queued; the caller then waits on ncclCommGetAsyncError).
// Otherwise a status whose code follows the error (a peer or the network
// failed: UNAVAILABLE; bad argument: INVALID_ARGUMENT; wrong usage:
// FAILED_PRECONDITION; else INTERNAL) and whose message holds `expr`, the
// error's text, NCCL's last message and file:line.
absl::Status ToStatus(ncclResult_t result, const char* expr, const char* file,
                      int line);

}  // namespace nccl_internal
}  // namespace lockstep

// Returns the converted status from the enclosing function when `expr` (an
// ncclResult_t) is neither ncclSuccess nor ncclInProgress.
#define NCCL_RETURN_IF_ERROR(expr)                                   \
  do {                                                               \
    ::absl::Status lockstep_nccl_status_ =                           \
        ::lockstep::nccl_internal::ToStatus((expr), #expr, __FILE__, \
                                            __LINE__);               \
    if (!lockstep_nccl_status_.ok()) return lockstep_nccl_status_;   \
  } while (0)

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_NCCL_NCCL_CHECK_H_
