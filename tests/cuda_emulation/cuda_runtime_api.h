// An emulation of the part of the CUDA runtime that worker/device/cuda uses, so
// that the tests run those very files -- the kernels and the CUDA device --
// on the CPU, on machines without a GPU or the CUDA toolkit
// (tests/cuda_emulation/CMakeLists.txt). Not the real header: the emulated
// targets put this directory first on the include path and build with
// LOCKSTEP_CUDA_EMULATION, which makes LOCKSTEP_LAUNCH
// (worker/device/cuda/kernel_util.cuh) call MakeLauncher (emulated_streams.h).
//
// Kernels: a launch runs its blocks one after another. The threads of a
// block run at once, one OS thread each (a pool, reused), so that
// __syncthreads and the warp shuffles (emulated with barriers) behave as on
// a GPU; kernels launched with LOCKSTEP_LAUNCH_INDEPENDENT (threads that
// never synchronize) run their threads one after another, much faster.
// Launch configurations the GPU would refuse (no blocks, more than 1024
// threads, grid.y or grid.z over 65535) set the error that
// cudaGetLastError returns, as CUDA does, and run nothing.
//
// The host side: one GPU; device memory that host code cannot touch,
// guarded at its ends, holding NaN until written (emulated_memory.h); and
// streams whose queued work runs as late as CUDA allows
// (emulated_streams.h), so that a missing wait is a wrong result, every time.
//
// What this cannot show: timing, real cuBLAS,
// and the GPU's arithmetic (nvcc fuses multiply-adds, CUDA's expf differs
// from glibc's in the last bits), so results are compared within rounding.
#ifndef LOCKSTEP_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_
#define LOCKSTEP_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_

#if !defined(LOCKSTEP_CUDA_EMULATION)
#error "tests/cuda_emulation is for LOCKSTEP_CUDA_EMULATION builds only"
#endif

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "emulated_blocks.h"   // Kernels: types, launches, built-ins.
#include "emulated_memory.h"   // Device memory, apart from the host's.
#include "emulated_streams.h"  // Streams and the launcher.

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

inline constexpr unsigned cudaStreamNonBlocking = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;
inline constexpr unsigned cudaHostAllocPortable = 0x01;

struct cudaDeviceProp {
  char name[256];
};

// ---- The host side of the runtime, for the CUDA device itself
// (worker/device/cuda/cuda_device.cc): one emulated GPU, the device memory of
// emulated_memory.h and the streams of emulated_streams.h. The tests that link
// the emulated device see "cuda:0 (emulated ...)".

namespace lockstep {
namespace cuda_emulation {

inline constexpr int kGpus = 1;

// Pinned host memory: 256-byte aligned, as cudaHostAlloc's.
inline cudaError_t AllocatePinned(void** p, size_t bytes) {
  if (p == nullptr) return cudaErrorInvalidValue;
  const size_t rounded = (bytes + 255) / 256 * 256;
  *p = std::aligned_alloc(256, rounded == 0 ? 256 : rounded);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

}  // namespace cuda_emulation
}  // namespace lockstep

inline const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorDevicesUnavailable:
      return "cudaErrorDevicesUnavailable";
    case cudaErrorNotReady:
      return "cudaErrorNotReady";
  }
  return "cudaErrorUnknown";
}
inline const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated CUDA error";
}

inline cudaError_t cudaGetDeviceCount(int* count) {
  *count = ::lockstep::cuda_emulation::kGpus;
  return cudaSuccess;
}
inline cudaError_t cudaSetDevice(int gpu) {
  return gpu >= 0 && gpu < ::lockstep::cuda_emulation::kGpus
             ? cudaSuccess
             : cudaErrorInvalidDevice;
}
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* properties,
                                           int gpu) {
  if (cudaSetDevice(gpu) != cudaSuccess) return cudaErrorInvalidDevice;
  std::strcpy(properties->name, "emulated on the CPU");
  return cudaSuccess;
}

// Device memory, kept apart from the host's (emulated_memory.h).
inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  return ::lockstep::cuda_emulation::DeviceMemory::Get().Allocate(p, bytes);
}
// As on a GPU, freeing waits for the device's queued work.
inline cudaError_t cudaFree(void* p) {
  ::lockstep::cuda_emulation::DrainDevice();
  return ::lockstep::cuda_emulation::DeviceMemory::Get().Free(p);
}
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned /*flags*/) {
  const cudaError_t e = ::lockstep::cuda_emulation::AllocatePinned(p, bytes);
  if (e == cudaSuccess) {
    std::lock_guard<std::recursive_mutex> lock(
        ::lockstep::cuda_emulation::StreamMutex());
    ::lockstep::cuda_emulation::PinnedRanges()[reinterpret_cast<uintptr_t>(
        *p)] = bytes == 0 ? 1 : bytes;
  }
  return e;
}
inline cudaError_t cudaFreeHost(void* p) {
  ::lockstep::cuda_emulation::DrainDevice();
  {
    std::lock_guard<std::recursive_mutex> lock(
        ::lockstep::cuda_emulation::StreamMutex());
    ::lockstep::cuda_emulation::PinnedRanges().erase(
        reinterpret_cast<uintptr_t>(p));
  }
  std::free(p);
  return cudaSuccess;
}

// As CUDA documents it: from pageable host memory the source is read
// before the call returns; to pageable host memory the call returns once
// the copy is done; to or from pinned memory, and device to device, the
// copy runs when the stream gets to it. Device sides must lie inside one
// allocation and the host sides must not be device memory, or the test
// stops (CUDA leaves a copy against its direction undefined).
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                                   cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  namespace emu = ::lockstep::cuda_emulation;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
  const bool device_src =
      kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  const bool device_dst =
      kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  if (kind == cudaMemcpyDefault) {
    if (emu::DeviceMemory::Get().Holds(src, 0)) {
      emu::RequireDevice(src, bytes, "cudaMemcpy source");
    }
    if (emu::DeviceMemory::Get().Holds(dst, 0)) {
      emu::RequireDevice(dst, bytes, "cudaMemcpy destination");
    }
  } else {
    if (device_src) {
      emu::RequireDevice(src, bytes, "cudaMemcpy source");
    } else {
      emu::RequireHost(src, "cudaMemcpy source");
    }
    if (device_dst) {
      emu::RequireDevice(dst, bytes, "cudaMemcpy destination");
    } else {
      emu::RequireHost(dst, "cudaMemcpy destination");
    }
  }
  if (kind == cudaMemcpyHostToDevice && !emu::IsPinned(src)) {
    auto copy = std::make_shared<std::vector<char>>(
        static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
    emu::Enqueue(stream, [=] { std::memcpy(dst, copy->data(), copy->size()); });
    return cudaSuccess;
  }
  emu::Enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  if (kind == cudaMemcpyDeviceToHost && !emu::IsPinned(dst) &&
      stream != nullptr) {
    emu::DrainAll(stream);
  }
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes,
                              cudaMemcpyKind kind) {
  ::lockstep::cuda_emulation::DrainDevice();
  return cudaMemcpyAsync(dst, src, bytes, kind);
}
inline cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes,
                                   cudaStream_t stream = nullptr) {
  if (bytes == 0) return cudaSuccess;
  if (p == nullptr) return cudaErrorInvalidValue;
  ::lockstep::cuda_emulation::RequireDevice(p, bytes, "cudaMemset");
  ::lockstep::cuda_emulation::Enqueue(stream,
                                      [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream,
                                             unsigned /*flags*/) {
  std::lock_guard<std::recursive_mutex> lock(
      ::lockstep::cuda_emulation::StreamMutex());
  *stream = new CUstream_st;
  ::lockstep::cuda_emulation::LiveStreams().push_back(*stream);
  return cudaSuccess;
}
// The stream's queued work still runs, as on a GPU.
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::lock_guard<std::recursive_mutex> lock(
      ::lockstep::cuda_emulation::StreamMutex());
  ::lockstep::cuda_emulation::DrainAll(stream);
  auto& live = ::lockstep::cuda_emulation::LiveStreams();
  live.erase(std::remove(live.begin(), live.end(), stream), live.end());
  delete stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (stream != nullptr) ::lockstep::cuda_emulation::DrainAll(stream);
  return cudaSuccess;
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event,
                                            unsigned /*flags*/) {
  *event = new CUevent_st;
  return cudaSuccess;
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t event,
                                   cudaStream_t stream = nullptr) {
  std::lock_guard<std::recursive_mutex> lock(
      ::lockstep::cuda_emulation::StreamMutex());
  event->stream = stream;
  event->position = stream == nullptr ? 0 : stream->queued;
  event->queries = 0;
  return cudaSuccess;
}
// Whether what `event` follows has run. Work runs only when something waits
// for it, so the first query of a recording says not ready; the second
// runs the work and says ready, as a GPU that has caught up would: callers
// that poll run both their paths, waiting and not.
inline cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::lock_guard<std::recursive_mutex> lock(
      ::lockstep::cuda_emulation::StreamMutex());
  if (event->stream == nullptr || event->stream->done >= event->position) {
    return cudaSuccess;
  }
  if (++event->queries < 2) return cudaErrorNotReady;
  ::lockstep::cuda_emulation::Drain(event->stream, event->position);
  return cudaSuccess;
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event->stream != nullptr) {
    ::lockstep::cuda_emulation::Drain(event->stream, event->position);
  }
  return cudaSuccess;
}
// `stream`'s later work waits for what `event` follows on its stream.
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                       unsigned /*flags*/ = 0) {
  CUstream_st* const other = event->stream;
  const uint64_t position = event->position;
  if (other == nullptr || other == stream) return cudaSuccess;
  ::lockstep::cuda_emulation::Enqueue(
      stream, [=] { ::lockstep::cuda_emulation::Drain(other, position); });
  return cudaSuccess;
}

#endif  // LOCKSTEP_TESTS_CUDA_EMULATION_CUDA_RUNTIME_API_H_
