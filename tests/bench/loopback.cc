#include "tests/bench/loopback.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/child_runner.h"

namespace lockstep {

absl::StatusOr<LoopbackResult> MeasureLoopback(const std::string& log_path,
                                               int interrupt_fd,
                                               absl::Duration duration) {
  ASSIGN_OR_RETURN(int port, PickFreeLoopbackPort());
  ASSIGN_OR_RETURN(std::unique_ptr<ChildRunner> runner,
                   ChildRunner::Create(log_path, interrupt_fd));
  const std::string port_arg = absl::StrCat(port);
  RETURN_IF_ERROR(runner
                      ->Start("iperf3-server", {kIperf3, "-s", "-1", "-B",
                                                "127.0.0.1", "-p", port_arg})
                      .status());
  // iperf3 buffers its banner when writing to a pipe; the socket table says
  // when it listens.
  RETURN_IF_ERROR(runner->WaitUntil(
      "waiting for iperf3 -s to listen",
      [port]() { return IsListeningOnLoopback(port); }, absl::Seconds(20)));
  ASSIGN_OR_RETURN(
      pid_t client,
      runner->Start(
          "iperf3-client",
          {kIperf3, "-c", "127.0.0.1", "-p", port_arg, "--bidir", "-t",
           absl::StrCat(absl::ToInt64Seconds(duration)), "-J"}));
  RETURN_IF_ERROR(runner->WaitForExit("running iperf3 -c --bidir", client,
                                      duration + absl::Seconds(30)));
  runner->StopAll(absl::Seconds(5));
  const std::string json = runner->OutputOf("iperf3-client");
  LoopbackResult result;
  ASSIGN_OR_RETURN(
      result.forward_bits_per_second,
      FindJsonNumber(json, {"end", "sum_received", "bits_per_second"}));
  ASSIGN_OR_RETURN(result.reverse_bits_per_second,
                   FindJsonNumber(json, {"end", "sum_received_bidir_reverse",
                                         "bits_per_second"}));
  return result;
}

}  // namespace lockstep
