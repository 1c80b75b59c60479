// The nearest known name to a mistyped one, for "did you mean" hints: the
// binaries' own flag parsing (common/flags/flags.cc) and lockstep_launch's
// routing of its arguments (deploy/launch/flag_routing.cc).
#ifndef LOCKSTEP_COMMON_BASE_NEAREST_NAME_H_
#define LOCKSTEP_COMMON_BASE_NEAREST_NAME_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace lockstep {

// The Levenshtein distance between `a` and `b` (insertions, deletions and
// substitutions of one character).
size_t EditDistance(absl::string_view a, absl::string_view b);

// The name in `known` nearest to `name` when it is near enough to be a
// typo (at most 1 + |name| / 4 edits); empty when none is.
std::string NearestFlag(absl::string_view name,
                        const std::vector<std::string>& known);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_BASE_NEAREST_NAME_H_
