// glibc malloc settings for processes that allocate the same large buffers
// every training step (gRPC's message slices, the server's new weights).
//
// By default glibc serves allocations over its dynamic mmap threshold with
// mmap and returns freed memory at the top of a heap to the kernel once
// more than twice that threshold is free; a step's buffers of a few hundred
// KiB are then faulted in, zeroed by the kernel and handed back, every
// step. Measured with `lockstep_bench comm` and `e2e` (docs/benchmarks.md):
// a 101,770-parameter step 0.86 -> 0.55 ms, the MLP 1.14x examples/s, the
// 25.6M steps unchanged, the server's peak memory up to 8% higher. Two
// arenas instead of glibc's 8 per core: a buffer freed by one of gRPC's
// threads is reused by the next, where each thread's arena kept its own
// (25.6M fp32, 2 workers: step 0.136 -> 0.114 s, server 378 -> 319 MiB).
#ifndef LOCKSTEP_COMMON_BASE_MALLOC_TUNING_H_
#define LOCKSTEP_COMMON_BASE_MALLOC_TUNING_H_

namespace lockstep {

// Allocations below 32 MiB come from the heap (a model's 4 MiB chunks
// included), a heap keeps up to 8 MiB free at its top, and all threads
// share at most two arenas. Does nothing
// where the user set malloc tunables of their own (GLIBC_TUNABLES naming
// glibc.malloc) or the C library is not glibc. Call first thing in main,
// before any thread.
void TuneMallocForSteps();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_MALLOC_TUNING_H_
