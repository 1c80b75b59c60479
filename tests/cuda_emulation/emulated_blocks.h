// The device side of the CUDA emulation (see cuda_runtime_api.h, the only
// header that includes this one): CUDA's qualifiers and basic types, the
// built-in thread coordinates, and the running of a launch's blocks --
// threads that synchronize on a pool of OS threads with real barriers for
// __syncthreads and the warp shuffles, threads that never do one after
// another on the calling thread.
#ifndef LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_BLOCKS_H_
#define LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_BLOCKS_H_

#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
// A block's shared memory: statics in one section, which Run sets to 0xFF
// bytes (a NaN, an int -1) before each block of a synchronizing kernel, as
// a GPU leaves shared memory holding whatever was there: a kernel that reads
// a slot no thread of its block wrote gets garbage here too.
#define __shared__ static __attribute__((section("lockstep_cuda_shared")))
extern "C" char __start_lockstep_cuda_shared[] __attribute__((weak));
extern "C" char __stop_lockstep_cuda_shared[] __attribute__((weak));

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
  cudaErrorNotReady = 600,
};
typedef enum cudaError cudaError_t;

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

// Sets every block's shared memory (the __shared__ statics of every kernel
// in the program) to 0xFF bytes.
inline void PoisonSharedMemory() {
  if (__start_lockstep_cuda_shared == nullptr) return;  // No __shared__.
  std::memset(__start_lockstep_cuda_shared, 0xFF,
              static_cast<size_t>(__stop_lockstep_cuda_shared -
                                  __start_lockstep_cuda_shared));
}

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
        PoisonSharedMemory();
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

#endif  // LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_BLOCKS_H_
