// The avx2 variant of common/kernels/kernels.h (its -m flags: common/CMakeLists.txt).
#define LOCKSTEP_KERNEL_NS avx2
#define LOCKSTEP_KERNEL_NAME "avx2"
#include "common/kernels/kernels_impl.inc"
