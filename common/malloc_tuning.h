// glibc malloc settings for processes that allocate the same large buffers
// every training step (gRPC's message slices, the server's new weights).
//
// By default glibc serves allocations over its dynamic mmap threshold with
// mmap and returns freed memory at the top of a heap to the kernel once
// more than twice that threshold is free; a step's buffers of a few hundred
// KiB are then faulted in, zeroed by the kernel and handed back, every
// step. Measured with `lockstep_bench comm --params=101770` (2 workers, 1
// server, docs/benchmarks.md): the server's apply took 90 us a step, and the
// step 0.65-0.75 ms; with these settings 20 us and 0.43-0.48 ms, and the
// 25.6M model's step and server peak memory stayed where they were.
#ifndef LOCKSTEP_COMMON_MALLOC_TUNING_H_
#define LOCKSTEP_COMMON_MALLOC_TUNING_H_

namespace lockstep {

// Allocations of 1 MiB and more come from mmap (a 4 MiB chunk is still
// returned to the kernel when freed), smaller ones from the heap, and a
// heap keeps up to 4 MiB free at its top. Does nothing where the user set
// malloc tunables of their own (GLIBC_TUNABLES naming glibc.malloc) or the
// C library is not glibc. Call first thing in main, before any thread.
void TuneMallocForSteps();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MALLOC_TUNING_H_
