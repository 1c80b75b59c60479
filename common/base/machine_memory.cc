#include "common/base/machine_memory.h"

#include <unistd.h>

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"

namespace lockstep {

int64_t MachineMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  int64_t bytes = pages > 0 && page > 0 ? int64_t{pages} * page : 0;
  std::ifstream cgroup("/sys/fs/cgroup/memory.max");  // cgroup v2.
  std::string limit;
  int64_t cgroup_bytes = 0;
  if (cgroup >> limit && absl::SimpleAtoi(limit, &cgroup_bytes) &&
      cgroup_bytes > 0 && (bytes == 0 || cgroup_bytes < bytes)) {
    bytes = cgroup_bytes;
  }
  return bytes;
}

}  // namespace lockstep
