#include "common/formats/tf_config.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/formats/json_value.h"

namespace lockstep {
namespace {

absl::Status Malformed(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed TF_CONFIG: ", what));
}

}  // namespace

std::vector<std::string> TfConfig::PsAddresses() const {
  auto it = cluster.find("ps");
  return it == cluster.end() ? std::vector<std::string>() : it->second;
}

int TfConfig::NumWorkers() const {
  int n = 0;
  for (const char* role : {"chief", "worker"}) {
    auto it = cluster.find(role);
    if (it != cluster.end()) n += static_cast<int>(it->second.size());
  }
  return n;
}

absl::StatusOr<int> TfConfig::WorkerRank() const {
  const bool has_chief = cluster.count("chief") > 0 && !cluster.at("chief").empty();
  if (task_type == "chief") return task_index;
  if (task_type == "worker") return task_index + (has_chief ? 1 : 0);
  return absl::InvalidArgumentError(absl::StrCat(
      "TF_CONFIG task type is \"", task_type, "\", expected chief or worker"));
}

absl::StatusOr<TfConfig> ParseTfConfig(absl::string_view json) {
  absl::StatusOr<JsonValue> root = JsonValue::Parse(json);
  if (!root.ok()) {
    return Malformed(absl::StrCat("not a JSON object (",
                                  std::string(root.status().message()), ")"));
  }
  if (root->type() != JsonValue::Type::kObject) {
    return Malformed("not a JSON object");
  }
  TfConfig config;
  const JsonValue* cluster = root->Find("cluster");
  if (cluster == nullptr || cluster->type() != JsonValue::Type::kObject) {
    return Malformed("missing object \"cluster\"");
  }
  for (const auto& [role, list] : cluster->members()) {
    if (list.type() != JsonValue::Type::kArray) {
      return Malformed(absl::StrCat("cluster.", role, " is not a list"));
    }
    std::vector<std::string>& addresses = config.cluster[role];
    addresses.clear();  // A repeated role: the last list counts.
    for (const JsonValue& v : list.array()) {
      if (v.type() != JsonValue::Type::kString || v.string().empty()) {
        return Malformed(absl::StrCat("cluster.", role,
                                      " holds a non-string or empty address"));
      }
      addresses.push_back(v.string());
    }
  }
  const JsonValue* task = root->Find("task");
  if (task == nullptr || task->type() != JsonValue::Type::kObject) {
    return Malformed("missing object \"task\"");
  }
  const JsonValue* type = task->Find("type");
  if (type == nullptr || type->type() != JsonValue::Type::kString) {
    return Malformed("task.type is missing or not a string");
  }
  config.task_type = type->string();
  if (const JsonValue* index = task->Find("index"); index != nullptr) {
    if (index->type() != JsonValue::Type::kNumber) {
      return Malformed("task.index is not a number");
    }
    const double value = index->number();
    if (value < 0 || value != std::floor(value) || value > 1e6) {
      return Malformed("task.index is not a non-negative integer");
    }
    config.task_index = static_cast<int>(value);
  }
  auto role_it = config.cluster.find(config.task_type);
  if (role_it == config.cluster.end()) {
    return Malformed(absl::StrCat("task.type \"", config.task_type,
                                  "\" has no list in cluster"));
  }
  if (config.task_index >= static_cast<int>(role_it->second.size())) {
    return Malformed(absl::StrCat("task.index ", config.task_index,
                                  " is out of range for cluster.",
                                  config.task_type, " (",
                                  role_it->second.size(), " entries)"));
  }
  return config;
}

}  // namespace lockstep
