// --help and --list_flags for Lockstep's binaries (common/flags/flags.h calls
// them). --help lists the program's own flags, those defined in its help
// files, grouped by topic under headers ("Job:", "Training:", "TLS and
// authentication:", ...), each written as absl writes it
// ("--name (help); default: ...;"); --helpfull stays absl's flat list of
// every flag. --list_flags prints one line per flag, "NAME bool" or
// "NAME value", for lockstep_launch to route its arguments by.
#ifndef LOCKSTEP_COMMON_FLAGS_FLAG_HELP_H_
#define LOCKSTEP_COMMON_FLAGS_FLAG_HELP_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace lockstep {

// The topic --help lists flag `name` under; "Other" when no topic names it.
absl::string_view FlagGroup(absl::string_view name);

// Whether `filename` (where a flag is defined) contains one of `help_files`.
bool IsHelpFile(absl::string_view filename,
                const std::vector<std::string>& help_files);

// Writes `usage`, then the flags defined in `help_files` group by group
// (alphabetical within a group), then a line pointing to --helpfull.
void PrintGroupedHelp(std::ostream& out, absl::string_view usage,
                      const std::vector<std::string>& help_files);

// Writes every registered flag as "NAME bool" or "NAME value", one a line,
// sorted by name.
void PrintFlagTable(std::ostream& out);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FLAGS_FLAG_HELP_H_
