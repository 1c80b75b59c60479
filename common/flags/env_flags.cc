#include "common/flags/env_flags.h"

#include <cstdlib>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The first five are one process's own port or address (lockstep_launch
// sets them per process).
constexpr size_t kPerProcess = 5;
constexpr absl::string_view kAll[] = {"listen",
                                      "port_file",
                                      "metrics_port",
                                      "health_port",
                                      "allreduce_host",
                                      "tls_cert",
                                      "tls_key",
                                      "tls_ca",
                                      "tls_server_name",
                                      "tls_refresh_s",
                                      "token_file",
                                      "insecure",
                                      "admin_identities",
                                      "worker_identities",
                                      "tls",
                                      "tls_dir",
                                      "metrics_port_base",
                                      "health_port_base",
                                      "server_port",
                                      "checkpoint_dir",
                                      "checkpoint_every_seconds",
                                      "checkpoints_to_keep",
                                      "data_dir",
                                      "tensorboard_dir",
                                      "trace_dir",
                                      "servers",
                                      "standby_servers",
                                      "standby_of"};

}  // namespace

absl::Span<const absl::string_view> EnvironmentFlags() { return kAll; }

absl::Span<const absl::string_view> PerProcessEnvironmentFlags() {
  return EnvironmentFlags().subspan(0, kPerProcess);
}

std::string EnvironmentVariableOf(absl::string_view flag) {
  return absl::StrCat("LOCKSTEP_", absl::AsciiStrToUpper(flag));
}

absl::StatusOr<std::vector<EnvironmentFlag>> SetFlagsFromEnvironment() {
  std::vector<EnvironmentFlag> set;
  for (absl::string_view name : EnvironmentFlags()) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    if (flag == nullptr) continue;  // Not this program's.
    const std::string variable = EnvironmentVariableOf(name);
    const char* value = std::getenv(variable.c_str());
    if (value == nullptr || *value == '\0') continue;
    std::string error;
    if (!flag->ParseFrom(value, &error)) {
      return absl::InvalidArgumentError(absl::StrCat(
          variable, "=", value, ": ", error, " (it sets --", name, ")"));
    }
    set.push_back({variable, std::string(name), value});
  }
  return set;
}

}  // namespace lockstep
