// Separates the launcher's own flags from the ones it passes to workers.
#ifndef LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_ARGS_H_
#define LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_ARGS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace lockstep {

// What the launcher knows about a flag name.
enum class FlagKind {
  kUnknown,  // Not the launcher's: passed through to the workers.
  kBool,     // The launcher's, may be written --name / --noname.
  kValued,   // The launcher's, must be written --name=value.
};

// Answers for one flag name (without dashes). main.cc asks absl's registry;
// tests pass a fixed table.
using FlagKindLookup = std::function<FlagKind(absl::string_view name)>;

// Whether `arg` looks like a flag (`-name`, `--name`, `--name=value`);
// then `name` is its name and `has_value` whether it has "=value".
bool ParseFlagSyntax(absl::string_view arg, absl::string_view* name,
                     bool* has_value);

struct SplitArgs {
  // argv[0] followed by the launcher's flags, ready for absl::ParseCommandLine.
  std::vector<std::string> launcher;
  // Everything else before a "--", in the order given, for RouteArgs
  // (flag_routing.h) to send to the servers or the workers.
  std::vector<std::string> passthrough;
  // Arguments for the servers alone, in order: the values of
  // --server_flag=ARG (repeatable).
  std::vector<std::string> server_flags;
  // Arguments for the workers alone, in order: the values of
  // --worker_flag=ARG (repeatable), then everything after a bare "--".
  std::vector<std::string> worker_flags;
  // A program to run as every worker instead of lockstep_worker, with its
  // arguments: everything after a "--" that a non-flag follows.
  std::vector<std::string> command;
};

// Splits a full argv (argv[0] first). absl 20220623 has no way to parse only
// the flags it knows and keep the rest, so this pre-scan does it instead.
//
// An argument belongs to the launcher when it is `--name=value`,
// `--name` or `--noname` (one or two leading dashes) and `lookup` knows
// `name`; `--noname` only for a kBool flag. `--server_flag=ARG` and
// `--worker_flag=ARG` put ARG in server_flags / worker_flags. Every
// argument after a bare "--" (the "--" itself is dropped) goes to
// worker_flags, which is how a worker flag that shares a launcher flag's
// name reaches the workers; when the argument right after the "--" is not
// a flag, the rest is a command to run as every worker
// (`-- python3 train.py ARGS`) and goes to `command`, untouched. The rest
// (other flags, positional arguments) goes to passthrough.
//
// A launcher flag that takes a value must be written `--name=value`: the
// separate-value form `--name value` is rejected with INVALID_ARGUMENT,
// because the value would otherwise silently become a worker argument.
absl::StatusOr<SplitArgs> SplitLauncherArgs(absl::Span<const std::string> argv,
                                            const FlagKindLookup& lookup);

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_LAUNCHER_ARGS_H_
