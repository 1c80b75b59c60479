#include "deploy/launch/flag_routing.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace lockstep {

absl::StatusOr<FlagTable> FlagTable::Parse(absl::string_view text) {
  std::map<std::string, FlagKind, std::less<>> kinds;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> parts = absl::StrSplit(line, ' ');
    if (parts.size() != 2 || parts[0].empty() ||
        (parts[1] != "bool" && parts[1] != "value")) {
      return absl::InvalidArgumentError(
          absl::StrCat("not a flag table line: \"", line, "\""));
    }
    kinds[std::string(parts[0])] =
        parts[1] == "bool" ? FlagKind::kBool : FlagKind::kValued;
  }
  if (kinds.empty()) return absl::InvalidArgumentError("no flag listed");
  return FlagTable(std::move(kinds));
}

FlagKind FlagTable::Kind(absl::string_view name) const {
  auto it = kinds_.find(name);
  return it == kinds_.end() ? FlagKind::kUnknown : it->second;
}

bool FlagTable::Takes(absl::string_view name) const {
  if (Kind(name) != FlagKind::kUnknown) return true;
  return absl::ConsumePrefix(&name, "no") && Kind(name) == FlagKind::kBool;
}

std::vector<std::string> FlagTable::Names() const {
  std::vector<std::string> names;
  for (const auto& [name, kind] : kinds_) names.push_back(name);
  return names;
}

namespace {

// INVALID_ARGUMENT for flag `name` that no binary takes.
absl::Status UnknownFlag(absl::string_view name, const FlagTable& server,
                         const FlagTable& worker,
                         const std::vector<std::string>& launcher_names) {
  std::vector<std::string> known = launcher_names;
  for (const FlagTable* table : {&server, &worker}) {
    for (std::string& n : table->Names()) known.push_back(std::move(n));
  }
  const std::string nearest = NearestFlag(name, known);
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown flag --", name,
      nearest.empty() ? "" : absl::StrCat("; did you mean --", nearest, "?"),
      " (neither lockstep_launch, lockstep_server nor lockstep_worker takes "
      "it; each one's --help lists its flags)"));
}

}  // namespace

absl::StatusOr<RoutedArgs> RouteArgs(
    absl::Span<const std::string> args, const FlagTable& server,
    const FlagTable& worker, const std::vector<std::string>& launcher_names) {
  RoutedArgs routed;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view name;
    bool has_value = false;
    if (!ParseFlagSyntax(args[i], &name, &has_value)) {
      routed.worker.push_back(args[i]);
      continue;
    }
    const FlagTable* table = worker.Takes(name)   ? &worker
                             : server.Takes(name) ? &server
                                                  : nullptr;
    if (table == nullptr) {
      return UnknownFlag(name, server, worker, launcher_names);
    }
    std::vector<std::string>& to =
        table == &worker ? routed.worker : routed.server;
    to.push_back(args[i]);
    // `--name VALUE`: the value goes along.
    if (!has_value && table->Kind(name) == FlagKind::kValued &&
        i + 1 < args.size()) {
      to.push_back(args[++i]);
    }
  }
  return routed;
}

std::string FirstPortFlag(absl::Span<const std::string> args) {
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view name;
    bool has_value = false;
    if (!ParseFlagSyntax(args[i], &name, &has_value) ||
        (name != "metrics_port" && name != "health_port")) {
      continue;
    }
    absl::string_view value;
    if (has_value) {
      value = absl::string_view(args[i]).substr(args[i].find('=') + 1);
    } else if (i + 1 < args.size()) {
      value = args[i + 1];
    }
    if (value != "0") return std::string(name);
  }
  return "";
}

}  // namespace lockstep
