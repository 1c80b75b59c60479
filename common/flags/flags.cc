#include "common/flags/flags.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/base/exit_codes.h"
#include "common/base/nearest_name.h"
#include "common/flags/env_flags.h"
#include "common/flags/flag_help.h"

ABSL_FLAG(bool, validate_only, false,
          "Check the flags as a start would (values and their combinations, "
          "not files or peers) and exit 0 without starting; 2 when they are "
          "wrong (lockstep_launch checks every command line so).");
ABSL_FLAG(bool, list_flags, false,
          "Print every flag this program takes, one a line as NAME bool or "
          "NAME value, and exit 0 (lockstep_launch routes its arguments by "
          "it).");

namespace lockstep {
namespace {

// The code std::exit should end with while flags are parsed; -1 otherwise.
std::atomic<int> exit_code_while_parsing{-1};

void ExitWithTheCodeWanted() {
  const int code = exit_code_while_parsing.load();
  if (code < 0) return;  // Not while parsing: std::exit goes on.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);  // _Exit, not exit: this runs inside std::exit.
}

// The flag name of a command-line argument ("--name=value", "-name",
// "--noname"), or empty for one that is not a flag.
absl::string_view FlagNameOf(absl::string_view arg) {
  if (!absl::ConsumePrefix(&arg, "-") || arg.empty()) return {};
  absl::ConsumePrefix(&arg, "-");
  return arg.substr(0, arg.find('='));
}

// Whether `name` is a registered flag, or "no" + a registered bool flag.
bool IsKnownFlag(absl::string_view name) {
  if (absl::FindCommandLineFlag(name) != nullptr) return true;
  if (!absl::ConsumePrefix(&name, "no")) return false;
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag != nullptr && flag->IsOfType<bool>();
}

// Before absl parses: an argument naming no flag of this program ends it
// with 2 and, when a flag's name is near it, "did you mean --that?". The
// arguments after a bare "--" are positional; with --undefok absl decides.
void RefuseUnknownFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const absl::string_view arg = argv[i];
    if (arg == "--") return;
    const absl::string_view name = FlagNameOf(arg);
    if (name == "undefok") return;
    if (name.empty() || IsKnownFlag(name)) continue;
    // --help, --helpfull, --version and the like: absl's usage flags, not
    // registered ones. Deducing one sets what absl's parse would set.
    const size_t eq = arg.find('=');
    if (absl::flags_internal::DeduceUsageFlags(
            name, eq == arg.npos ? absl::string_view() : arg.substr(eq + 1))) {
      continue;
    }
    std::vector<std::string> known;
    for (const auto& [flag_name, flag] : absl::GetAllFlags()) {
      known.emplace_back(flag_name);
    }
    const std::string nearest = NearestFlag(name, known);
    std::fprintf(stderr,
                 "%s: unknown flag --%.*s%s%s%s (--help lists the flags)\n",
                 argv[0], static_cast<int>(name.size()), name.data(),
                 nearest.empty() ? "" : "; did you mean --", nearest.c_str(),
                 nearest.empty() ? "" : "?");
    std::exit(kExitPermanent);
  }
}

// One line on stderr naming the flags the environment set, and those it
// would have set had the command line not given them: a deployment's
// settings are visible in every process's log.
void ReportEnvironmentFlags(const char* program,
                            const std::vector<EnvironmentFlag>& from_env) {
  if (from_env.empty()) return;
  std::vector<std::string> used, overridden;
  for (const EnvironmentFlag& f : from_env) {
    if (absl::flags_internal::WasPresentOnCommandLine(f.flag)) {
      overridden.push_back(f.variable);
    } else {
      used.push_back(
          absl::StrCat("--", f.flag, "=", f.value, " (", f.variable, ")"));
    }
  }
  std::string line =
      absl::StrCat(program, ": from the environment: ",
                   used.empty() ? "none" : absl::StrJoin(used, ", "));
  if (!overridden.empty()) {
    absl::StrAppend(&line, "; the command line overrides ",
                    absl::StrJoin(overridden, ", "));
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace

bool ValidateOnly() { return absl::GetFlag(FLAGS_validate_only); }

std::vector<char*> ParseFlags(int argc, char** argv,
                              std::vector<std::string> help_files) {
  if (!help_files.empty()) {
    absl::FlagsUsageConfig config;
    config.contains_help_flags = [help_files](absl::string_view file) {
      return IsHelpFile(file, help_files);
    };
    config.contains_helpshort_flags = config.contains_help_flags;
    absl::SetFlagsUsageConfig(std::move(config));
  }
  // absl::ParseCommandLine, less its handling of --help and the like
  // (below): what leaves from inside now is a failure to parse.
  RefuseUnknownFlags(argc, argv);
  // The environment first, so that the command line overrides it.
  absl::StatusOr<std::vector<EnvironmentFlag>> from_env =
      SetFlagsFromEnvironment();
  if (!from_env.ok()) {
    std::fprintf(stderr, "%s: %s\n", argv[0],
                 std::string(from_env.status().message()).c_str());
    std::exit(kExitPermanent);
  }
  static const bool registered = std::atexit(ExitWithTheCodeWanted) == 0;
  if (registered) exit_code_while_parsing.store(kExitPermanent);
  std::vector<char*> positional = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  exit_code_while_parsing.store(-1);
  if (absl::GetFlag(FLAGS_list_flags)) {
    PrintFlagTable(std::cout);
    std::exit(kExitOk);
  }
  // Plain --help: the program's own flags by topic (common/flags/flag_help.h).
  if (!help_files.empty() && absl::flags_internal::GetFlagsHelpMode() ==
                                 absl::flags_internal::HelpMode::kImportant) {
    PrintGroupedHelp(std::cout, absl::ProgramUsageMessage(), help_files);
    std::exit(kExitOk);
  }
  // -1: no usage flag; 1: help was printed; 0: --version or
  // --only_check_args. The user asked for all of them: exit 0.
  if (absl::flags_internal::HandleUsageFlags(
          std::cout, absl::ProgramUsageMessage()) != -1) {
    std::exit(kExitOk);
  }
  ReportEnvironmentFlags(argv[0], *from_env);
  return positional;
}

}  // namespace lockstep
