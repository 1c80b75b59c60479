#include "server/ctl/trace_merge.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/formats/json_value.h"

namespace lockstep {
namespace {

// The pids of one file's events (`list`), each to itself or, where an
// earlier file has it (`used`), to the next pid free in both; advances
// *next_pid past those taken.
std::map<int64_t, int64_t> RenumberPids(const JsonValue& list,
                                        const std::set<int64_t>& used,
                                        int64_t* next_pid) {
  std::set<int64_t> mine;
  for (const JsonValue& e : list.array()) {
    const JsonValue* pid = e.Find("pid");
    if (pid != nullptr && pid->type() == JsonValue::Type::kNumber) {
      mine.insert(static_cast<int64_t>(pid->number()));
    }
  }
  std::map<int64_t, int64_t> renumber;
  for (int64_t p : mine) {
    int64_t to = p;
    if (used.count(p) > 0) {
      while (used.count(*next_pid) > 0 || mine.count(*next_pid) > 0) {
        ++*next_pid;
      }
      to = (*next_pid)++;
    }
    renumber[p] = to;
  }
  return renumber;
}

}  // namespace

absl::StatusOr<std::string> MergeTraces(
    const std::vector<std::pair<std::string, std::string>>& files) {
  std::set<int64_t> used;  // pids of the files merged so far.
  int64_t next_pid = 1;
  std::string events;
  size_t count = 0;
  for (const auto& [name, contents] : files) {
    absl::StatusOr<JsonValue> doc = JsonValue::Parse(contents);
    if (!doc.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": not JSON: ", doc.status().message()));
    }
    JsonValue* list = &*doc;
    if (doc->type() == JsonValue::Type::kObject) {
      list = doc->FindMutable("traceEvents");
    }
    if (list == nullptr || list->type() != JsonValue::Type::kArray) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": not a trace (no traceEvents array)"));
    }
    const std::map<int64_t, int64_t> renumber =
        RenumberPids(*list, used, &next_pid);
    for (JsonValue& e : list->mutable_array()) {
      if (e.type() != JsonValue::Type::kObject) {
        return absl::InvalidArgumentError(
            absl::StrCat(name, ": a trace event is not an object"));
      }
      JsonValue* pid = e.FindMutable("pid");
      if (pid != nullptr && pid->type() == JsonValue::Type::kNumber) {
        const auto p = static_cast<int64_t>(pid->number());
        if (const int64_t to = renumber.at(p); to != p) {
          *pid = JsonValue::Number(static_cast<double>(to));
        }
      }
      absl::StrAppend(&events, count++ > 0 ? ",\n" : "");
      e.AppendJson(&events);
    }
    for (const auto& [from, to] : renumber) used.insert(to);
  }
  return absl::StrCat(
      "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", events,
      "\n],\"otherData\":{\"clock\":\"CLOCK_REALTIME\",\"merged_files\":\"",
      files.size(), "\"}}\n");
}

}  // namespace lockstep
