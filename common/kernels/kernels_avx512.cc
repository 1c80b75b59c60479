// The avx512 variant of common/kernels/kernels.h (its -m flags: common/CMakeLists.txt).
#define LOCKSTEP_KERNEL_NS avx512
#define LOCKSTEP_KERNEL_NAME "avx512"
#include "common/kernels/kernels_impl.inc"
