// Command-line parsing with Lockstep's exit codes (common/exit_codes.h).
//
// absl::ParseCommandLine ends the process with 1 both for a flag it cannot
// parse (an unknown name, a value of the wrong type) and after --help.
// Lockstep's binaries promise 2 for bad flags (kExitPermanent: a restart
// fails the same way, docs/faults.md) and a user who asks for help gets 0.
// ParseFlags keeps absl's parser and messages and changes only the code:
// absl leaves through std::exit, whose atexit handlers run first, and the
// one armed here while parsing ends the process with the code wanted.
#ifndef LOCKSTEP_COMMON_FLAGS_H_
#define LOCKSTEP_COMMON_FLAGS_H_

#include <string>
#include <vector>

namespace lockstep {

// As absl::ParseCommandLine (the positional arguments, argv[0] first), but
// a bad flag exits 2 and --help, --helpfull, --helpshort, --helpon,
// --helpmatch, --helppackage and --version exit 0. With --only_check_args
// absl's own codes stand (0 when the flags parse, 1 when not).
//
// `help_files`, when not empty, sets which flags --help lists: those
// defined in a source file whose path contains one of the strings (the
// program's own, say, and common/tls_flags.cc). --helpfull lists all.
std::vector<char*> ParseFlags(int argc, char** argv,
                              std::vector<std::string> help_files = {});

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FLAGS_H_
