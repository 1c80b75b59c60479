#include "common/tf_config.h"

#include <cmath>

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

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
  Struct root;
  google::protobuf::util::JsonParseOptions options;
  auto status = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(json.data(), json.size()), &root, options);
  if (!status.ok()) {
    return Malformed(absl::StrCat("not a JSON object (",
                                  std::string(status.message()), ")"));
  }
  TfConfig config;
  auto cluster_it = root.fields().find("cluster");
  if (cluster_it == root.fields().end() ||
      !cluster_it->second.has_struct_value()) {
    return Malformed("missing object \"cluster\"");
  }
  for (const auto& [role, list] : cluster_it->second.struct_value().fields()) {
    if (!list.has_list_value()) {
      return Malformed(absl::StrCat("cluster.", role, " is not a list"));
    }
    std::vector<std::string>& addresses = config.cluster[role];
    for (const Value& v : list.list_value().values()) {
      if (v.kind_case() != Value::kStringValue || v.string_value().empty()) {
        return Malformed(absl::StrCat("cluster.", role,
                                      " holds a non-string or empty address"));
      }
      addresses.push_back(v.string_value());
    }
  }
  auto task_it = root.fields().find("task");
  if (task_it == root.fields().end() || !task_it->second.has_struct_value()) {
    return Malformed("missing object \"task\"");
  }
  const auto& task = task_it->second.struct_value().fields();
  auto type_it = task.find("type");
  if (type_it == task.end() ||
      type_it->second.kind_case() != Value::kStringValue) {
    return Malformed("task.type is missing or not a string");
  }
  config.task_type = type_it->second.string_value();
  auto index_it = task.find("index");
  if (index_it != task.end()) {
    if (index_it->second.kind_case() != Value::kNumberValue) {
      return Malformed("task.index is not a number");
    }
    double index = index_it->second.number_value();
    if (index < 0 || index != std::floor(index) || index > 1e6) {
      return Malformed("task.index is not a non-negative integer");
    }
    config.task_index = static_cast<int>(index);
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
