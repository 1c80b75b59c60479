// Sends each argument that is not the launcher's to the servers or the
// workers by the flags each binary takes (its --list_flags table), and
// names the nearest known flag when an argument is no one's.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_FLAG_ROUTING_H_
#define LOCKSTEP_DEPLOY_LAUNCH_FLAG_ROUTING_H_

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/base/nearest_name.h"  // NearestFlag, for its hints.
#include "deploy/launch/launcher_args.h"

namespace lockstep {

// The flags one binary takes, by name (without dashes).
class FlagTable {
 public:
  // From `--list_flags` output: lines "NAME bool" or "NAME value".
  // INVALID_ARGUMENT for any other line, or when there is no line at all.
  static absl::StatusOr<FlagTable> Parse(absl::string_view text);
  // From (name, kind) pairs, for tests and the launcher's own flags.
  explicit FlagTable(std::map<std::string, FlagKind, std::less<>> kinds)
      : kinds_(std::move(kinds)) {}
  FlagTable() = default;

  // kBool or kValued for a name the binary takes; kUnknown otherwise.
  FlagKind Kind(absl::string_view name) const;
  // Whether `name` is a flag here, or "no" + the name of a bool flag.
  bool Takes(absl::string_view name) const;
  // Every name, sorted.
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, FlagKind, std::less<>> kinds_;
};

struct RoutedArgs {
  std::vector<std::string> server;
  std::vector<std::string> worker;
};

// Routes `args` (SplitArgs::passthrough) in order: a flag the worker takes
// goes to the workers, else one the server takes to the servers (a
// `--name VALUE` pair together); arguments that are not flags go to the
// workers. A flag neither takes is INVALID_ARGUMENT naming it and, when
// one is near, the nearest of theirs and `launcher_names` ("did you mean
// --workers?").
absl::StatusOr<RoutedArgs> RouteArgs(
    absl::Span<const std::string> args, const FlagTable& server,
    const FlagTable& worker, const std::vector<std::string>& launcher_names);

// The first of --metrics_port / --health_port in `args` (`--name=N` or
// `--name N`) with a port other than 0, as "metrics_port" or "health_port";
// empty when none. Given to several processes on one host, every one of
// them would try the same port.
std::string FirstPortFlag(absl::Span<const std::string> args);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_FLAG_ROUTING_H_
