// How much memory this process may use, for the server's default
// --max_state_mb and the worker's bound on --synthetic_examples: the
// machine's, or its cgroup's limit where that is lower (a container's).
#ifndef LOCKSTEP_COMMON_BASE_MACHINE_MEMORY_H_
#define LOCKSTEP_COMMON_BASE_MACHINE_MEMORY_H_

#include <cstdint>

namespace lockstep {

// The machine's memory in bytes, or the cgroup v2 limit
// (/sys/fs/cgroup/memory.max) where that is lower. 0 when neither can be
// read.
int64_t MachineMemoryBytes();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_MACHINE_MEMORY_H_
