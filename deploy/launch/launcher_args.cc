#include "deploy/launch/launcher_args.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace lockstep {

bool ParseFlagSyntax(absl::string_view arg, absl::string_view* name,
                     bool* has_value) {
  if (!absl::ConsumePrefix(&arg, "-")) return false;
  absl::ConsumePrefix(&arg, "-");
  const size_t eq = arg.find('=');
  *has_value = eq != absl::string_view::npos;
  *name = arg.substr(0, eq);
  return !name->empty();
}

namespace {

absl::Status NeedsValue(absl::string_view name) {
  return absl::InvalidArgumentError(
      absl::StrCat("launcher flag --", name, " needs a value: write --", name,
                   "=VALUE (the form --", name, " VALUE is not supported)"));
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
      std::vector<std::string>& to =
          command ? split.command : split.worker_flags;
      to.insert(to.end(), argv.begin() + i + 1, argv.end());
      break;
    }
    if (!ParseFlagSyntax(arg, &name, &has_value)) {
      split.passthrough.push_back(arg);
      continue;
    }
    if (std::vector<std::string>* explicit_args =
            name == "server_flag"   ? &split.server_flags
            : name == "worker_flag" ? &split.worker_flags
                                    : nullptr) {
      if (!has_value) return NeedsValue(name);
      explicit_args->push_back(arg.substr(arg.find('=') + 1));
      continue;
    }
    const FlagKind kind = lookup(name);
    if (kind == FlagKind::kValued && !has_value) return NeedsValue(name);
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
