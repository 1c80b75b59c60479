// The generic variant of common/kernels/kernels.h (its -m flags:
// common/CMakeLists.txt).
#define LOCKSTEP_KERNEL_NS generic
#define LOCKSTEP_KERNEL_NAME "generic"
#include "common/kernels/kernels_impl.inc"
