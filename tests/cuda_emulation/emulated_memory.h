// The device memory of the CUDA emulation (see cuda_runtime_api.h, the
// only header that includes this one), kept apart from the host's as a GPU
// keeps it, so that the mistakes a GPU punishes fail the tests here too:
//
// - Host code may not touch device memory. Each allocation is its own
//   mapping, inaccessible except while device work runs (a kernel, a copy,
//   a memset or a cuBLAS call, see DeviceWork): a host read or write stops
//   the test with the address, the allocation and a backtrace.
// - Past the end of every allocation lies a page nothing may touch, and the
//   bytes between the end and that page (cudaMalloc rounds to 256) and
//   before the start are set to a pattern that cudaFree checks: reading or
//   writing past an allocation stops the test.
// - New memory holds 0xFF bytes (a float NaN, an int -1), not zeros, since
//   cudaMalloc does not clear it: a result that depends on memory nobody
//   wrote shows.
// - Copies, memsets, cuBLAS's matrices and kernels' pointer arguments are
//   checked to lie inside one allocation (or, for a kernel, in pinned host
//   memory), and copies to match their direction (see Require*).
//
// What it cannot see: a kernel reaching pageable host memory through a
// pointer captured in a functor (ForEach's lambdas), and a host thread
// touching device memory while another thread's device work runs.
#ifndef LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_MEMORY_H_
#define LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_MEMORY_H_

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "emulated_blocks.h"

namespace lockstep {
namespace cuda_emulation {

inline constexpr unsigned char kUnwrittenByte = 0xFF;  // New memory.
inline constexpr unsigned char kPaddingByte = 0xFE;    // Around it.

// `mapping` holds `pages` bytes and then one guard page; cudaMalloc
// returned `start`, 256-byte aligned, whose `bytes` rounded up to 256 end
// at the guard page.
struct DeviceAllocation {
  char* mapping;
  size_t pages;
  char* start;
  size_t bytes;
};

// Every live allocation, and whether device work is running (then the
// allocations are readable and writable, otherwise nothing may touch
// them).
class DeviceMemory {
 public:
  static DeviceMemory& Get() {
    static auto* memory = new DeviceMemory;  // Never destroyed.
    return *memory;
  }

  cudaError_t Allocate(void** p, size_t bytes) {
    if (p == nullptr) return cudaErrorInvalidValue;
    const size_t page = PageSize();
    const size_t rounded = (bytes + 255) / 256 * 256;
    const size_t pages = (rounded + page - 1) / page * page;
    if (pages == 0 || pages < bytes) return cudaErrorMemoryAllocation;
    void* mapping = mmap(nullptr, pages + page, PROT_NONE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (mapping == MAP_FAILED) return cudaErrorMemoryAllocation;
    DeviceAllocation a;
    a.mapping = static_cast<char*>(mapping);
    a.pages = pages;
    a.start = a.mapping + (pages - rounded);
    a.bytes = bytes;
    std::lock_guard<std::mutex> lock(mu_);
    Protect(a, PROT_READ | PROT_WRITE);
    std::memset(a.mapping, kPaddingByte, pages);
    std::memset(a.start, kUnwrittenByte, bytes);
    if (device_work_ == 0) Protect(a, PROT_NONE);
    allocations_[reinterpret_cast<uintptr_t>(a.start)] = a;
    *p = a.start;
    return cudaSuccess;
  }

  // Stops the test if the padding around the allocation was written.
  cudaError_t Free(void* p) {
    if (p == nullptr) return cudaSuccess;
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocations_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocations_.end()) {
      Fail("cudaFree of %p, which no cudaMalloc returned (or freed twice)", p);
    }
    const DeviceAllocation a = it->second;
    Protect(a, PROT_READ | PROT_WRITE);
    const char* end = a.start + a.bytes;
    const char* pages_end = a.mapping + a.pages;
    for (const char* q = a.mapping; q < pages_end; ++q) {
      if (q == a.start) q = end;
      if (q < pages_end && static_cast<unsigned char>(*q) != kPaddingByte) {
        Fail(
            "a kernel, copy or cuBLAS call wrote outside the %zu-byte "
            "device allocation at %p, %td bytes %s (found at cudaFree)",
            a.bytes, static_cast<const void*>(a.start),
            q < a.start ? a.start - q : q - end,
            q < a.start ? "before its start" : "past its end");
      }
    }
    allocations_.erase(it);
    munmap(a.mapping, a.pages + PageSize());
    return cudaSuccess;
  }

  // Whether one allocation holds [p, p + bytes); with bytes 0, whether one
  // holds p or ends at it.
  bool Holds(const void* p, size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto address = reinterpret_cast<uintptr_t>(p);
    auto it = allocations_.upper_bound(address);
    if (it == allocations_.begin()) return false;
    --it;
    const DeviceAllocation& a = it->second;
    const uintptr_t offset = address - reinterpret_cast<uintptr_t>(a.start);
    return offset <= a.bytes && bytes <= a.bytes - offset;
  }

  // Device work runs between Enter and Leave, which nest and may come
  // from several threads; the allocations are accessible while any runs.
  void EnterDeviceWork() {
    std::lock_guard<std::mutex> lock(mu_);
    if (device_work_++ == 0) {
      for (auto& entry : allocations_) {
        Protect(entry.second, PROT_READ | PROT_WRITE);
      }
    }
  }
  void LeaveDeviceWork() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--device_work_ == 0) {
      for (auto& entry : allocations_) Protect(entry.second, PROT_NONE);
    }
  }

  [[noreturn]] static void Fail(const char* format, ...)
      __attribute__((format(printf, 1, 2))) {
    std::fputs("CUDA emulation: ", stderr);
    va_list args;
    va_start(args, format);
    std::vfprintf(stderr, format, args);
    va_end(args);
    std::fputc('\n', stderr);
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    std::abort();
  }

 private:
  DeviceMemory() {
    void* frames[1];
    backtrace(frames, 1);  // Loads the unwinder now, not in the handler.
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_sigaction = &DeviceMemory::OnFault;
    // On the alternate stack when there is one: the sanitizers report stack
    // overflows from there, and a handler without it would lose them.
    action.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    sigaction(SIGSEGV, &action, &PreviousAction());
  }

  static size_t PageSize() {
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    return page;
  }
  static struct sigaction& PreviousAction() {
    static struct sigaction previous;
    return previous;
  }

  static void Protect(const DeviceAllocation& a, int protection) {
    if (mprotect(a.mapping, a.pages, protection) != 0) {
      Fail("mprotect of a device allocation failed: %s", std::strerror(errno));
    }
  }

  // SIGSEGV: if the address is device memory, says which allocation and
  // who touched it, with a backtrace, then lets the fault take its course
  // (the handler that was there before, by default a crash).
  static void OnFault(int signal, siginfo_t* info, void* context) {
    if (info->si_code <= 0) {
      // Sent by kill or raise, not a fault: to the handler before ours,
      // once this one returns.
      sigaction(SIGSEGV, &PreviousAction(), nullptr);
      raise(signal);
      return;
    }
    DeviceMemory& memory = Get();
    const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
    bool ours = false;
    char message[512];
    if (memory.mu_.try_lock()) {
      const size_t page = PageSize();
      for (const auto& entry : memory.allocations_) {
        const DeviceAllocation& a = entry.second;
        const auto mapping = reinterpret_cast<uintptr_t>(a.mapping);
        if (address < mapping || address >= mapping + a.pages + page) continue;
        ours = true;
        const bool guard = address >= mapping + a.pages;
        std::snprintf(
            message, sizeof(message),
            "CUDA emulation: %s %p, %s the %zu-byte device allocation at "
            "%p\n",
            guard || memory.device_work_ > 0
                ? "a kernel, copy or cuBLAS call reached"
                : "host code touched device memory at",
            info->si_addr,
            guard ? "past the end of"
                  : (address < reinterpret_cast<uintptr_t>(a.start) ? "before"
                                                                    : "in"),
            a.bytes, static_cast<const void*>(a.start));
        break;
      }
      memory.mu_.unlock();
    }
    sigaction(SIGSEGV, &PreviousAction(), nullptr);
    if (!ours) return;  // Not device memory: fault again, as before.
    const ssize_t written = write(STDERR_FILENO, message, std::strlen(message));
    (void)written;
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
    (void)context;
  }

  std::mutex mu_;
  std::map<uintptr_t, DeviceAllocation> allocations_;  // By start.
  int device_work_ = 0;
};

// A scope in which device work runs: the allocations are accessible.
class DeviceWork {
 public:
  DeviceWork() { DeviceMemory::Get().EnterDeviceWork(); }
  ~DeviceWork() { DeviceMemory::Get().LeaveDeviceWork(); }
  DeviceWork(const DeviceWork&) = delete;
  DeviceWork& operator=(const DeviceWork&) = delete;
};

// Stops the test unless [p, p + bytes) lies in one device allocation;
// `what` names the pointer for the message.
inline void RequireDevice(const void* p, size_t bytes, const char* what) {
  if (!DeviceMemory::Get().Holds(p, bytes)) {
    DeviceMemory::Fail(
        "%s: %zu bytes at %p are not inside one device "
        "allocation",
        what, bytes, p);
  }
}
// Stops the test if p is device memory (a copy's host side).
inline void RequireHost(const void* p, const char* what) {
  if (DeviceMemory::Get().Holds(p, 0)) {
    DeviceMemory::Fail(
        "%s: %p is device memory, but the copy's direction "
        "says host",
        what, p);
  }
}

}  // namespace cuda_emulation
}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_CUDA_EMULATION_EMULATED_MEMORY_H_
