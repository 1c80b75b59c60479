#include "common/flags.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/exit_codes.h"

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

// Whether argv (up to "--") names the flag `name` as -name or --name,
// alone or with =VALUE.
bool Names(int argc, char** argv, absl::string_view name) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") break;
    if (!absl::ConsumePrefix(&arg, "--") && !absl::ConsumePrefix(&arg, "-")) {
      continue;
    }
    if (arg.substr(0, arg.find('=')) == name) return true;
  }
  return false;
}

bool AsksForUsage(int argc, char** argv) {
  for (absl::string_view usage : {"help", "helpfull", "helpshort", "helpon",
                                  "helpmatch", "helppackage", "version"}) {
    if (Names(argc, argv, usage)) return true;
  }
  return false;
}

}  // namespace

std::vector<char*> ParseFlags(int argc, char** argv,
                              std::vector<std::string> help_files) {
  if (!help_files.empty()) {
    absl::FlagsUsageConfig config;
    config.contains_help_flags = [help_files](absl::string_view file) {
      for (const std::string& part : help_files) {
        if (absl::StrContains(file, part)) return true;
      }
      return false;
    };
    config.contains_helpshort_flags = config.contains_help_flags;
    absl::SetFlagsUsageConfig(std::move(config));
  }
  if (Names(argc, argv, "only_check_args")) {
    return absl::ParseCommandLine(argc, argv);
  }
  static const bool registered = std::atexit(ExitWithTheCodeWanted) == 0;
  if (registered) {
    exit_code_while_parsing.store(AsksForUsage(argc, argv) ? kExitOk
                                                           : kExitPermanent);
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  exit_code_while_parsing.store(-1);
  return positional;
}

}  // namespace lockstep
