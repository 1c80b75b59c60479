#include "deploy/launch/launcher_args.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lockstep {
namespace {

// Classifies one argument; `name` and `has_value` describe `arg` when it looks
// like a flag. Returns whether it looks like a flag at all.
bool ParseFlagSyntax(absl::string_view arg, absl::string_view* name,
                     bool* has_value) {
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  absl::ConsumePrefix(&arg, "-");
  const size_t eq = arg.find('=');
  *has_value = eq != absl::string_view::npos;
  *name = arg.substr(0, eq);
  return !name->empty();
}

}  // namespace

absl::StatusOr<SplitArgs> SplitLauncherArgs(absl::Span<const std::string> argv,
                                            const FlagKindLookup& lookup) {
  SplitArgs split;
  if (argv.empty()) return split;
  split.launcher.push_back(argv[0]);
  for (size_t i = 1; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    absl::string_view name;
    bool has_value = false;
    if (arg == "--") {
      const bool command = i + 1 < argv.size() &&
                           !ParseFlagSyntax(argv[i + 1], &name, &has_value);
      std::vector<std::string>& to = command ? split.command : split.passthrough;
      to.insert(to.end(), argv.begin() + i + 1, argv.end());
      break;
    }
    if (!ParseFlagSyntax(arg, &name, &has_value)) {
      split.passthrough.push_back(arg);
      continue;
    }
    const FlagKind kind = lookup(name);
    if (kind == FlagKind::kValued && !has_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launcher flag --", name, " needs a value: write --", name,
          "=VALUE (the form --", name, " VALUE is not supported)"));
    }
    if (kind != FlagKind::kUnknown) {
      split.launcher.push_back(arg);
      continue;
    }
    absl::string_view positive = name;
    if (!has_value && absl::ConsumePrefix(&positive, "no") &&
        lookup(positive) == FlagKind::kBool) {
      split.launcher.push_back(arg);
      continue;
    }
    split.passthrough.push_back(arg);
  }
  return split;
}

}  // namespace lockstep
