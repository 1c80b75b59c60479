// TensorFlow's TF_CONFIG cluster description, as Kubeflow's TFJob sets it:
//   {"cluster": {"ps": ["h0:2222"], "worker": ["h1:2222", "h2:2222"]},
//    "task": {"type": "worker", "index": 0}}
// Lockstep reads the "ps", "worker" and "chief" lists. A "chief" takes worker
// rank 0 and the "worker" entries follow it (rank = index + 1), as in
// TensorFlow's parameter-server strategy.
#ifndef LOCKSTEP_COMMON_FORMATS_TF_CONFIG_H_
#define LOCKSTEP_COMMON_FORMATS_TF_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

struct TfConfig {
  std::map<std::string, std::vector<std::string>> cluster;
  std::string task_type;
  int task_index = 0;

  // The parameter-server addresses ("ps" list).
  std::vector<std::string> PsAddresses() const;
  // Number of training replicas: chief (0 or 1) plus workers.
  int NumWorkers() const;
  // This task's worker rank; INVALID_ARGUMENT unless it is a chief or worker.
  absl::StatusOr<int> WorkerRank() const;
};

// Parses TF_CONFIG's JSON text. Errors say what is malformed or missing.
absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FORMATS_TF_CONFIG_H_
