#include "common/kernels/kernels.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace lockstep {
namespace kernels {
namespace generic {
extern const Table kTable;
}
#if defined(LOCKSTEP_KERNELS_X86)
namespace avx2 {
extern const Table kTable;
}
namespace avx512 {
extern const Table kTable;
}
#endif

namespace {

bool CanRun(const Table* table) {
#if defined(LOCKSTEP_KERNELS_X86)
  if (table == &avx2::kTable) return __builtin_cpu_supports("avx2");
  if (table == &avx512::kTable) {
    return __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
  }
#endif
  return table == &generic::kTable;
}

const Table* Choose() {
  const std::vector<const Table*> runnable = Runnable();
  const char* wanted = std::getenv("LOCKSTEP_KERNELS");
  if (wanted != nullptr && *wanted != '\0') {
    for (const Table* table : runnable) {
      if (std::strcmp(table->name, wanted) == 0) return table;
    }
    std::fprintf(stderr,
                 "lockstep: LOCKSTEP_KERNELS=%s is not a variant this CPU "
                 "runs; using %s\n",
                 wanted, runnable.back()->name);
  }
  return runnable.back();
}

}  // namespace

std::vector<const Table*> Built() {
  return {
    &generic::kTable
#if defined(LOCKSTEP_KERNELS_X86)
        ,
        &avx2::kTable, &avx512::kTable
#endif
  };
}

std::vector<const Table*> Runnable() {
  std::vector<const Table*> out;
  for (const Table* table : Built()) {
    if (CanRun(table)) out.push_back(table);
  }
  return out;
}

const Table& Active() {
  static const Table* const active = Choose();
  return *active;
}

}  // namespace kernels
}  // namespace lockstep
