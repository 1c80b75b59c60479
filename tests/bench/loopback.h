// The loopback floor: what `iperf3 --bidir` moves over 127.0.0.1 in both
// directions at once, the most a one-machine benchmark can expect to move.
#ifndef LOCKSTEP_TESTS_BENCH_LOOPBACK_H_
#define LOCKSTEP_TESTS_BENCH_LOOPBACK_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace lockstep {

inline constexpr char kIperf3[] = "/usr/bin/iperf3";

struct LoopbackResult {
  double forward_bits_per_second = 0;  // Client to server, as received.
  double reverse_bits_per_second = 0;  // Server to client, as received.
  double TotalBytesPerSecond() const {
    return (forward_bits_per_second + reverse_bits_per_second) / 8;
  }
};

// Runs `iperf3 -s` on a free loopback port and `iperf3 -c --bidir -t
// duration -J` against it, with their output in the new file `log_path`;
// stops both.
absl::StatusOr<LoopbackResult> MeasureLoopback(const std::string& log_path,
                                               int interrupt_fd,
                                               absl::Duration duration);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_LOOPBACK_H_
