// The streams of the CUDA emulation (see cuda_runtime_api.h, the only
// header that includes this one): queues of work that runs as late as CUDA
// allows, the kernel launcher that queues on them, and the pinned ranges
// that decide which copies are asynchronous.
#ifndef LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_STREAMS_H_
#define LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_STREAMS_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <type_traits>
#include <vector>

#include "emulated_blocks.h"
#include "emulated_memory.h"

namespace lockstep {
namespace cuda_emulation {

// ---- Streams. Work queued on a stream runs as late as CUDA allows: when
// the host waits for it (cudaStreamSynchronize, cudaFree, a copy to
// pageable memory) or another stream waits for it through an event. So a
// missing wait shows deterministically: the host reads memory the queued
// work has not written yet, or a stream reads what another has not
// produced. The legacy default stream (null) runs everything at once.

inline std::recursive_mutex& StreamMutex() {
  static auto* mu = new std::recursive_mutex;
  return *mu;
}

}  // namespace cuda_emulation
}  // namespace lockstep

struct CUstream_st {
  std::deque<std::function<void()>> queue;
  uint64_t queued = 0;  // Operations ever queued.
  uint64_t done = 0;    // Operations run, in order.
};
struct CUevent_st {
  CUstream_st* stream = nullptr;
  uint64_t position = 0;  // The stream's operations it follows.
  int queries = 0;        // cudaEventQuery calls since it was recorded.
};

namespace lockstep {
namespace cuda_emulation {

// Every live stream, for the calls that wait for the whole device.
inline std::vector<CUstream_st*>& LiveStreams() {
  static auto* streams = new std::vector<CUstream_st*>;
  return *streams;
}

// Runs `stream`'s queued operations up to its `position`-th.
inline void Drain(CUstream_st* stream, uint64_t position) {
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  if (stream->done >= position || stream->queue.empty()) return;
  DeviceWork device_work;
  while (stream->done < position && !stream->queue.empty()) {
    std::function<void()> op = std::move(stream->queue.front());
    stream->queue.pop_front();
    ++stream->done;
    op();
  }
}
inline void DrainAll(CUstream_st* stream) {
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  Drain(stream, stream->queued);
}
inline void DrainDevice() {
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  for (CUstream_st* stream : LiveStreams()) DrainAll(stream);
}

inline void Enqueue(CUstream_st* stream, std::function<void()> op) {
  if (stream == nullptr) {
    std::lock_guard<std::recursive_mutex> lock(StreamMutex());
    DeviceWork device_work;
    op();
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  stream->queue.push_back(std::move(op));
  ++stream->queued;
}

// cudaHostAlloc'd ranges: a copy to or from pinned memory is asynchronous;
// one to or from pageable memory is not (see cudaMemcpyAsync).
inline std::map<uintptr_t, size_t>& PinnedRanges() {
  static auto* ranges = new std::map<uintptr_t, size_t>;
  return *ranges;
}
inline bool IsPinned(const void* p) {
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  const auto address = reinterpret_cast<uintptr_t>(p);
  auto it = PinnedRanges().upper_bound(address);
  if (it == PinnedRanges().begin()) return false;
  --it;
  return address < it->first + it->second;
}

// A kernel's pointer argument must be null, device memory or pinned host
// memory (which a GPU reaches through unified addressing); pageable host
// memory would be an illegal address there.
template <typename Arg>
void CheckKernelArgument(const char* kernel, int index, const Arg& arg) {
  if constexpr (std::is_pointer_v<Arg>) {
    if (arg != nullptr && !DeviceMemory::Get().Holds(arg, 0) &&
        !IsPinned(arg)) {
      DeviceMemory::Fail(
          "kernel %s: argument %d (%p) is pageable host "
          "memory, which a GPU cannot reach",
          kernel, index, static_cast<const void*>(arg));
    }
  }
}

// LOCKSTEP_LAUNCH(kernel, grid, block, shared, stream)(args...) in
// emulation: checked now (cudaGetLastError sees a bad configuration at
// once, as on a GPU; a pointer argument a GPU could not use stops the
// test), run when the stream gets to it.
template <typename Kernel>
struct Launcher {
  bool independent;
  const char* name;
  dim3 grid, block;
  cudaStream_t stream;
  Kernel kernel;
  template <typename... Args>
  void operator()(Args... args) const {
    if (!ValidLaunch(grid, block)) {
      last_error = cudaErrorInvalidConfiguration;
      return;
    }
    int index = 0;
    (CheckKernelArgument(name, index++, args), ...);
    const bool independent_ = independent;
    const dim3 grid_ = grid, block_ = block;
    const Kernel kernel_ = kernel;
    Enqueue(stream,
            [=] { Run(independent_, grid_, block_, kernel_, args...); });
  }
};
template <typename Kernel>
Launcher<Kernel> MakeLauncher(bool independent, const char* name, dim3 grid,
                              dim3 block, cudaStream_t stream, Kernel kernel) {
  return Launcher<Kernel>{independent, name, grid, block, stream, kernel};
}

}  // namespace cuda_emulation
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_STREAMS_H_
