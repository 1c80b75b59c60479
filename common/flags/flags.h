// Command-line parsing with Lockstep's exit codes (common/base/exit_codes.h).
//
// absl::ParseCommandLine ends the process with 1 both for a flag it cannot
// parse (an unknown name, a value of the wrong type) and after --help.
// Lockstep's binaries promise 2 for bad flags (kExitPermanent: a restart
// fails the same way, docs/faults.md) and a user who asks for help gets 0.
// ParseFlags keeps absl's parser and messages (through its internal entry
// point, with the usage flags left for afterwards) and changes only the
// codes: absl leaves a failed parse through std::exit, whose atexit
// handlers run first, and the one armed here while parsing ends the
// process with 2; the usage flags are then handled here, and exit 0.
#ifndef LOCKSTEP_COMMON_FLAGS_FLAGS_H_
#define LOCKSTEP_COMMON_FLAGS_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// `value`, or INVALID_ARGUMENT with its error after the flag it came from
// ("--push_window: ..."): a library's error says what is wrong, the flag
// layer which flag it was.
template <typename T>
absl::StatusOr<T> FromFlag(absl::string_view flag, absl::StatusOr<T> value) {
  if (value.ok()) return value;
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": ", value.status().message()));
}

// As absl::ParseCommandLine (the positional arguments, argv[0] first), but
// a bad flag exits 2 (--only_check_args included), and --help, --helpfull,
// --helpshort, --helpon, --helpmatch, --helppackage, --version and
// --only_check_args exit 0 when the flags parse.
//
// `help_files`, when not empty, sets which flags --help lists: those
// defined in a source file whose path contains one of the strings (the
// program's own, say, and common/security/tls_flags.cc), grouped by topic
// (common/flags/flag_help.h). --helpfull lists all. --list_flags prints every
// flag's name and kind, one a line, and exits 0.
std::vector<char*> ParseFlags(int argc, char** argv,
                              std::vector<std::string> help_files = {});

// Whether --validate_only was given: the program checks its options as it
// would to start (after ParseFlags), then exits 0 instead of starting.
bool ValidateOnly();

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FLAGS_FLAGS_H_
