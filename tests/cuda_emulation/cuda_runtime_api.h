// An emulation of the part of the CUDA runtime that worker/cuda uses, so
// that the tests run those very files -- the kernels and the CUDA device --
// on the CPU, on machines without a GPU or the CUDA toolkit
// (tests/cuda_emulation/CMakeLists.txt). Not the real header: the emulated
// targets put this directory first on the include path and build with
// LOCKSTEP_CUDA_EMULATION, which makes LOCKSTEP_LAUNCH
// (worker/cuda/kernel_util.cuh) call MakeLauncher below.
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
// The host side: one GPU, "device" memory from the host's heap, and
// streams whose queued work runs as late as CUDA allows (see Streams
// below), so that a missing wait is a wrong result, every time.
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
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)  // NOLINT: CUDA's.
      : x(x_), y(y_), z(z_) {}
};

typedef struct CUstream_st* cudaStream_t;
typedef struct CUevent_st* cudaEvent_t;

// Named as in CUDA (enum cudaError, typedef'd), with CUDA's values, so
// that functions taking it mangle alike: a test that also links code
// built against the real runtime (the NCCL all-reduce) resolves to the
// emulated definitions rather than pulling in the real device's.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorDevicesUnavailable = 46,
};
typedef enum cudaError cudaError_t;

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

namespace lockstep {
namespace cuda_emulation {

// Where the calling emulated thread is.
inline thread_local dim3 thread_index, block_index, block_dim, grid_dim;

// The error of the last launch on this host thread (CUDA keeps it per
// thread too).
inline thread_local cudaError_t last_error = cudaSuccess;

// A reusable barrier (std::barrier is C++20), from which a thread that has
// finished drops out so that the others do not wait for it.
class Barrier {
 public:
  explicit Barrier(int count) : count_(count) {}
  void ArriveAndWait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == count_) {
      Release();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != generation; });
  }
  void ArriveAndDrop() {
    std::lock_guard<std::mutex> lock(mu_);
    --count_;
    if (count_ > 0 && arrived_ == count_) Release();
  }

 private:
  void Release() {
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int count_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
};

// One block's barrier, and per warp a barrier and a slot per lane for the
// shuffles.
struct Block {
  explicit Block(int threads) : barrier(threads), slots(threads) {
    for (int first = 0; first < threads; first += 32) {
      warps.push_back(std::make_unique<Barrier>(
          threads - first < 32 ? threads - first : 32));
    }
  }
  Barrier barrier;
  std::vector<std::unique_ptr<Barrier>> warps;
  std::vector<uint64_t> slots;
};
// The block the calling emulated thread is in; null when the threads run
// one after another (LOCKSTEP_LAUNCH_INDEPENDENT).
inline thread_local Block* current_block = nullptr;

// A thread of a block run one thread at a time asked for a barrier.
[[noreturn]] inline void BarrierWithoutBlock() {
  std::fprintf(stderr,
               "CUDA emulation: a kernel launched with "
               "LOCKSTEP_LAUNCH_INDEPENDENT used __syncthreads or a warp "
               "shuffle; launch it with LOCKSTEP_LAUNCH\n");
  std::abort();
}

// The calling thread's block, for a barrier or shuffle.
inline Block& SynchronizingBlock() {
  if (current_block == nullptr) BarrierWithoutBlock();
  return *current_block;
}

inline int LinearThread() {
  return static_cast<int>(thread_index.x +
                          block_dim.x *
                              (thread_index.y + block_dim.y * thread_index.z));
}

// The value `value` of lane `source` of the calling thread's warp.
template <typename T>
T Shuffle(T value, int source) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffle of a wide type");
  const int tid = LinearThread();
  const int warp = tid / 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  Block& block = SynchronizingBlock();
  block.slots[tid] = bits;
  block.warps[warp]->ArriveAndWait();
  bits = block.slots[warp * 32 + source];
  block.warps[warp]->ArriveAndWait();
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// The OS threads that play a block's threads, made once and reused by
// every block of every launch (creating 256 threads per block made the
// tests spend their time in the kernel). RunBlock(n, body) runs body(t) for
// t in [0, n) on n threads at once and returns when all have finished.
class BlockThreads {
 public:
  static BlockThreads& Get() {
    static BlockThreads* pool = new BlockThreads;  // Never destroyed.
    return *pool;
  }

  void RunBlock(int threads, const std::function<void(int)>& body) {
    // One block at a time, whichever host thread launches it (the device
    // may be used from several).
    std::lock_guard<std::mutex> one_block(block_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    while (static_cast<int>(workers_.size()) < threads) {
      const int index = static_cast<int>(workers_.size());
      workers_.emplace_back([this, index] { Work(index); });
      workers_.back().detach();
    }
    body_ = &body;
    active_ = threads;
    running_ = threads;
    ++generation_;
    start_.notify_all();
    done_.wait(lock, [&] { return running_ == 0; });
    body_ = nullptr;
  }

 private:
  BlockThreads() = default;

  void Work(int index) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      start_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (index >= active_) continue;
      const std::function<void(int)>* body = body_;
      lock.unlock();
      (*body)(index);
      lock.lock();
      if (--running_ == 0) done_.notify_one();
    }
  }

  std::mutex block_mu_;
  std::mutex mu_;
  std::condition_variable start_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* body_ = nullptr;
  int active_ = 0;
  int running_ = 0;
  uint64_t generation_ = 0;
};

// Runs fn(args...) on every thread of grid x block: the threads of a block
// at once, or (independent: a kernel launched with
// LOCKSTEP_LAUNCH_INDEPENDENT, whose threads never synchronize) one after
// another on the calling thread, far faster; a barrier reached there stops
// the test with a message.
template <typename Fn, typename... Args>
void Run(bool independent, const dim3& grid, const dim3& block, Fn fn,
         Args... args) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (independent) {
    current_block = nullptr;
    grid_dim = grid;
    block_dim = block;
    for (unsigned bz = 0; bz < grid.z; ++bz) {
      for (unsigned by = 0; by < grid.y; ++by) {
        for (unsigned bx = 0; bx < grid.x; ++bx) {
          block_index = dim3(bx, by, bz);
          for (unsigned t = 0; t < threads; ++t) {
            thread_index = dim3(t % block.x, (t / block.x) % block.y,
                                t / (block.x * block.y));
            fn(args...);
          }
        }
      }
    }
    return;
  }
  for (unsigned bz = 0; bz < grid.z; ++bz) {
    for (unsigned by = 0; by < grid.y; ++by) {
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block shared(static_cast<int>(threads));
        const std::function<void(int)> body = [&](int t) {
          const unsigned u = static_cast<unsigned>(t);
          current_block = &shared;
          grid_dim = grid;
          block_dim = block;
          block_index = dim3(bx, by, bz);
          thread_index = dim3(u % block.x, (u / block.x) % block.y,
                              u / (block.x * block.y));
          fn(args...);
          shared.barrier.ArriveAndDrop();
          shared.warps[u / 32]->ArriveAndDrop();
        };
        BlockThreads::Get().RunBlock(static_cast<int>(threads), body);
      }
    }
  }
}

// Whether a GPU would run a launch of grid x block at all.
inline bool ValidLaunch(const dim3& grid, const dim3& block) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  return grid.x > 0 && grid.y > 0 && grid.z > 0 && grid.y <= 65535 &&
         grid.z <= 65535 && threads > 0 && threads <= 1024 && block.z <= 64;
}

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
    op();
    return;
  }
  std::lock_guard<std::recursive_mutex> lock(StreamMutex());
  stream->queue.push_back(std::move(op));
  ++stream->queued;
}

// LOCKSTEP_LAUNCH(kernel, grid, block, shared, stream)(args...) in
// emulation: checked now (cudaGetLastError sees a bad configuration at
// once, as on a GPU), run when the stream gets to it.
template <typename Kernel>
struct Launcher {
  bool independent;
  dim3 grid, block;
  cudaStream_t stream;
  Kernel kernel;
  template <typename... Args>
  void operator()(Args... args) const {
    if (!ValidLaunch(grid, block)) {
      last_error = cudaErrorInvalidConfiguration;
      return;
    }
    const bool independent_ = independent;
    const dim3 grid_ = grid, block_ = block;
    const Kernel kernel_ = kernel;
    Enqueue(stream,
            [=] { Run(independent_, grid_, block_, kernel_, args...); });
  }
};
template <typename Kernel>
Launcher<Kernel> MakeLauncher(bool independent, dim3 grid, dim3 block,
                              cudaStream_t stream, Kernel kernel) {
  return Launcher<Kernel>{independent, grid, block, stream, kernel};
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

}  // namespace cuda_emulation
}  // namespace lockstep

// The kernels' view of CUDA's built-ins.
#define threadIdx ::lockstep::cuda_emulation::thread_index
#define blockIdx ::lockstep::cuda_emulation::block_index
#define blockDim ::lockstep::cuda_emulation::block_dim
#define gridDim ::lockstep::cuda_emulation::grid_dim

inline cudaError_t cudaGetLastError() {
  const cudaError_t e = ::lockstep::cuda_emulation::last_error;
  ::lockstep::cuda_emulation::last_error = cudaSuccess;
  return e;
}

inline void __syncthreads() {
  ::lockstep::cuda_emulation::SynchronizingBlock().barrier.ArriveAndWait();
}

template <typename T>
T __shfl_sync(unsigned /*mask*/, T value, int source) {
  return ::lockstep::cuda_emulation::Shuffle(value, source % 32);
}

template <typename T>
T __shfl_down_sync(unsigned /*mask*/, T value, unsigned delta) {
  const int lane = ::lockstep::cuda_emulation::LinearThread() % 32;
  const int source = lane + static_cast<int>(delta);
  // A lane past the warp's end keeps its own value, as on the GPU.
  return ::lockstep::cuda_emulation::Shuffle(value,
                                             source < 32 ? source : lane);
}

inline int min(int a, int b) { return a < b ? a : b; }

// ---- The host side of the runtime, for the CUDA device itself
// (worker/cuda/cuda_device.cc): one emulated GPU, "device" memory from the
// host's heap, and the streams above. The tests that link the emulated
// device see "cuda:0 (emulated ...)".

namespace lockstep {
namespace cuda_emulation {

inline constexpr int kGpus = 1;

// 256-byte aligned, as cudaMalloc's.
inline cudaError_t Allocate(void** p, size_t bytes) {
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

inline cudaError_t cudaMalloc(void** p, size_t bytes) {
  return ::lockstep::cuda_emulation::Allocate(p, bytes);
}
// As on a GPU, freeing waits for the device's queued work.
inline cudaError_t cudaFree(void* p) {
  ::lockstep::cuda_emulation::DrainDevice();
  std::free(p);
  return cudaSuccess;
}
inline cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned /*flags*/) {
  const cudaError_t e = ::lockstep::cuda_emulation::Allocate(p, bytes);
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
// copy runs when the stream gets to it.
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes,
                                   cudaMemcpyKind kind,
                                   cudaStream_t stream = nullptr) {
  namespace emu = ::lockstep::cuda_emulation;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return cudaErrorInvalidValue;
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
