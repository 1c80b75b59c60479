#include "worker/exchange/allreduce/nccl/nccl_all_reducer.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <utility>

#include "absl/memory/memory.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "worker/device/cuda/cuda_check.h"
#include "worker/exchange/allreduce/coordinator_client.h"
#include "worker/exchange/allreduce/nccl/nccl_check.h"

namespace lockstep {
namespace {

// How often a wait on the communicator or the stream looks again. NCCL's
// own progress does not need us; this only bounds how late a deadline is
// noticed.
constexpr absl::Duration kPollInterval = absl::Microseconds(50);

}  // namespace

struct NcclAllReducer::Impl {
  ~Impl() {
    if (comm != nullptr) {
      // A healthy communicator flushes its work first; a failed or stuck
      // one is aborted, which never waits for peers.
      bool finalized = false;
      if (broken.ok()) {
        const ncclResult_t r = ncclCommFinalize(comm);  // Non-blocking.
        finalized = (r == ncclSuccess || r == ncclInProgress) &&
                    WaitComm(absl::Now() + absl::Seconds(10)).ok();
      }
      if (finalized) {
        ncclCommDestroy(comm);
      } else {
        ncclCommAbort(comm);
      }
    }
    if (staging != nullptr) cudaFree(staging);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  // Polls the non-blocking communicator until its queued work (joining,
  // enqueuing a collective, finalizing) is no longer in progress.
  absl::Status WaitComm(absl::Time deadline) {
    for (;;) {
      ncclResult_t state = ncclSuccess;
      NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
      if (state == ncclSuccess) return absl::OkStatus();
      if (state != ncclInProgress) {
        return nccl_internal::ToStatus(state, "NCCL communicator", __FILE__,
                                       __LINE__);
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "NCCL on rank ", options.rank, " of ", options.size,
            " did not progress before the deadline (is every rank taking "
            "part?)"));
      }
      absl::SleepFor(kPollInterval);
    }
  }

  // Waits for the stream's work, watching the communicator for a failed
  // peer and the deadline for a missing one.
  absl::Status WaitStream(absl::Time deadline) {
    for (;;) {
      const cudaError_t done = cudaStreamQuery(stream);
      if (done == cudaSuccess) return absl::OkStatus();
      if (done != cudaErrorNotReady) {
        CUDA_RETURN_IF_ERROR(done);
      }
      // Not an error, but cleared so that the next kernel launch's check
      // (cudaGetLastError) on this thread cannot take it for its own.
      cudaGetLastError();
      ncclResult_t state = ncclSuccess;
      NCCL_RETURN_IF_ERROR(ncclCommGetAsyncError(comm, &state));
      if (state != ncclSuccess && state != ncclInProgress) {
        return nccl_internal::ToStatus(state, "ncclAllReduce (asynchronous)",
                                       __FILE__, __LINE__);
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "ncclAllReduce on rank ", options.rank, " did not finish within ",
            absl::FormatDuration(options.op_timeout),
            " (is every rank taking part?)"));
      }
      absl::SleepFor(kPollInterval);
    }
  }

  absl::Status EnsureStaging(size_t count) {
    if (count <= staging_count) return absl::OkStatus();
    if (staging != nullptr) {
      CUDA_RETURN_IF_ERROR(cudaFree(staging));
      staging = nullptr;
      staging_count = 0;
    }
    void* p = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&p, count * sizeof(float)));
    staging = static_cast<float*>(p);
    staging_count = count;
    return absl::OkStatus();
  }

  // FAILED_PRECONDITION once an all-reduce has failed.
  absl::Status Usable() const {
    if (broken.ok()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("a previous NCCL all-reduce failed: ", broken.message()));
  }

  // Records the first failure: the ranks are out of step after it, and
  // ~Impl aborts the communicator.
  absl::Status Track(absl::Status status) {
    if (!status.ok() && broken.ok()) broken = status;
    return status;
  }

  AllReduceOptions options;
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  float* staging = nullptr;  // Device buffer for AllReduceSum's host data.
  size_t staging_count = 0;
  absl::Status broken;  // The first failure of an all-reduce.
};

absl::StatusOr<std::unique_ptr<NcclAllReducer>> NcclAllReducer::Create(
    const AllReduceOptions& options) {
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices);
      e != cudaSuccess || devices == 0) {
    cudaGetLastError();  // Reported here; not for a later check to find.
    return absl::FailedPreconditionError(absl::StrCat(
        "the nccl all-reduce needs a GPU and none is visible",
        e != cudaSuccess ? absl::StrCat(" (", cudaGetErrorString(e), ")")
                         : ""));
  }
  if (options.gpu >= devices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpu ", options.gpu, " is not visible (", devices, " GPU(s))"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  CUDA_RETURN_IF_ERROR(cudaSetDevice(options.gpu));
  CUDA_RETURN_IF_ERROR(
      cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking));

  const absl::Time deadline = absl::Now() + options.rendezvous_timeout;
  ncclUniqueId id;
  if (options.size == 1) {
    NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  } else {
    ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorClient> coordinator,
                     CoordinatorClient::Create(
                         options.coordinator,
                         options.tls));
    const std::string key = absl::StrCat(options.group, "/nccl/unique_id");
    if (options.rank == 0) {
      NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
      RETURN_IF_ERROR(coordinator->Set(
          key, absl::string_view(id.internal, sizeof(id.internal)), deadline));
    } else {
      ASSIGN_OR_RETURN(std::string bytes, coordinator->Get(key, deadline));
      if (bytes.size() != sizeof(id.internal)) {
        return absl::InternalError(absl::StrCat(
            "NCCL unique id under \"", key, "\" has ", bytes.size(),
            " bytes, expected ", sizeof(id.internal)));
      }
      std::memcpy(id.internal, bytes.data(), bytes.size());
    }
  }
  // Non-blocking, so that a missing rank ends in DEADLINE_EXCEEDED (and an
  // abort, in ~Impl) rather than a hang.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  NCCL_RETURN_IF_ERROR(ncclCommInitRankConfig(&impl->comm, options.size, id,
                                              options.rank, &config));
  if (absl::Status s = impl->WaitComm(deadline); !s.ok()) {
    impl->broken = s;
    return s;
  }
  return absl::WrapUnique(new NcclAllReducer(std::move(impl)));
}

NcclAllReducer::NcclAllReducer(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

NcclAllReducer::~NcclAllReducer() = default;

absl::Status NcclAllReducer::AllReduceSumOnDevice(float* device_data,
                                                  size_t count) {
  RETURN_IF_ERROR(impl_->Usable());
  if (count == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + impl_->options.op_timeout;
  return impl_->Track([&]() -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.gpu));
    NCCL_RETURN_IF_ERROR(ncclAllReduce(device_data, device_data, count,
                                       ncclFloat32, ncclSum, impl_->comm,
                                       impl_->stream));
    RETURN_IF_ERROR(impl_->WaitComm(deadline));
    return impl_->WaitStream(deadline);
  }());
}

absl::Status NcclAllReducer::AllReduceSum(absl::Span<float> data) {
  RETURN_IF_ERROR(impl_->Usable());
  if (data.empty()) return absl::OkStatus();
  const size_t bytes = data.size() * sizeof(float);
  {
    absl::Status staged = impl_->Track([&]() -> absl::Status {
      CUDA_RETURN_IF_ERROR(cudaSetDevice(impl_->options.gpu));
      RETURN_IF_ERROR(impl_->EnsureStaging(data.size()));
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(impl_->staging, data.data(), bytes,
                                           cudaMemcpyHostToDevice,
                                           impl_->stream));
      return absl::OkStatus();
    }());
    RETURN_IF_ERROR(staged);
  }
  RETURN_IF_ERROR(AllReduceSumOnDevice(impl_->staging, data.size()));
  return impl_->Track([&]() -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data.data(), impl_->staging, bytes,
                                         cudaMemcpyDeviceToHost,
                                         impl_->stream));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(impl_->stream));
    return absl::OkStatus();
  }());
}

absl::StatusOr<std::unique_ptr<AllReducer>> CreateNcclAllReducer(
    const AllReduceOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<NcclAllReducer> reducer,
                   NcclAllReducer::Create(options));
  return std::unique_ptr<AllReducer>(std::move(reducer));
}

}  // namespace lockstep
