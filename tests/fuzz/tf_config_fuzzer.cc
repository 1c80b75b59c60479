// libFuzzer target: ParseTfConfig (common/formats/tf_config.h) on arbitrary text.
#include <cstddef>
#include <cstdint>

#include "common/formats/tf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  absl::StatusOr<lockstep::TfConfig> config = lockstep::ParseTfConfig(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) return 0;
  // What parses is usable: the task's own entry exists.
  const auto it = config->cluster.find(config->task_type);
  if (it == config->cluster.end() || config->task_index < 0 ||
      config->task_index >= static_cast<int>(it->second.size())) {
    __builtin_trap();
  }
  (void)config->PsAddresses();
  (void)config->NumWorkers();
  (void)config->WorkerRank();
  return 0;
}
