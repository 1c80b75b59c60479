// Small helpers the benchmark's modes share: order statistics, reading
// figures out of other programs' output, /proc, and scratch directories.
// Free functions; thread-compatible.
#ifndef LOCKSTEP_TESTS_BENCH_BENCH_UTIL_H_
#define LOCKSTEP_TESTS_BENCH_BENCH_UTIL_H_

#include <sys/types.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// The q-quantile (0 <= q <= 1) of `values` by linear interpolation between
// order statistics (numpy's default); 0 for an empty vector.
double Quantile(std::vector<double> values, double q);
inline double Median(std::vector<double> values) {
  return Quantile(std::move(values), 0.5);
}

// The number that follows the keys `path` in `text`, each key searched (as
// "key", quotes included) after the previous one, then a colon. Enough for
// the flat or well-known JSON of our summaries and of `iperf3 -J`; not a
// JSON parser. NOT_FOUND when a key or the number is missing.
absl::StatusOr<double> FindJsonNumber(
    absl::string_view text, std::initializer_list<absl::string_view> path);

// The number after the last "key=" in `text` (the peers' "k=v" lines).
absl::StatusOr<double> FindKeyValueNumber(absl::string_view text,
                                          absl::string_view key);

// Removes the "[name] " tag ProcessGroup puts before each line of `name`'s
// output, and drops other children's lines.
std::string UntagLines(absl::string_view text, absl::string_view name);

// The peak resident set (VmHWM) of a live process, in bytes.
absl::StatusOr<int64_t> PeakRssBytes(pid_t pid);

// Whether some socket listens on 127.0.0.1:`port` (TCP, IPv4).
bool IsListeningOnLoopback(int port);

// The 1-minute load average (/proc/loadavg): how busy the machine was
// besides us, for the record; -1 if unreadable.
double LoadAverage();

// The machine's CPU time from /proc/stat's "cpu" line, in clock ticks:
// busy (user, nice, system, irq, softirq, steal) and all; zeros when
// unreadable.
struct CpuTimes {
  int64_t busy = 0;
  int64_t total = 0;
};
CpuTimes ReadCpuTimes();
// Busy share of every CPU between two readings, 0..1; -1 when unknown.
double CpuBusyFraction(const CpuTimes& before, const CpuTimes& after);

// A TCP port on 127.0.0.1 that was free a moment ago.
absl::StatusOr<int> PickFreeLoopbackPort();

// A new directory under $TMPDIR (else /tmp).
absl::StatusOr<std::string> MakeScratchDir(absl::string_view prefix);

// The whole file, or NOT_FOUND.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_BENCH_UTIL_H_
