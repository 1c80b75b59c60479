// The generic variant of common/kernels.h (its -m flags:
// common/CMakeLists.txt).
#define LOCKSTEP_KERNEL_NS generic
#define LOCKSTEP_KERNEL_NAME "generic"
#include "common/kernels_impl.inc"
