// A strict reader of the Prometheus text exposition format (0.0.4) for
// tests: checks what our /metrics endpoints write and gives the samples'
// values. Not thread-safe; plain functions.
#ifndef LOCKSTEP_TESTS_INTEGRATION_PROMETHEUS_TEXT_H_
#define LOCKSTEP_TESTS_INTEGRATION_PROMETHEUS_TEXT_H_

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// Series (name plus labels exactly as written, e.g.
// `x_bucket{rank="0",le="0.5"}`) to value.
using PrometheusSamples = std::map<std::string, double>;

// Parses and checks `text`: every line is a # HELP, # TYPE or a sample;
// names and label names are valid and label values properly quoted; each
// family has one HELP and one TYPE (counter, gauge or histogram) before its
// samples, and its samples are contiguous; counters are not negative;
// histograms have _bucket series with increasing le ending in +Inf,
// cumulative counts that never decrease, and _count equal to the +Inf
// bucket, plus _sum. INVALID_ARGUMENT naming the line otherwise.
absl::StatusOr<PrometheusSamples> ParsePrometheusText(absl::string_view text);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_INTEGRATION_PROMETHEUS_TEXT_H_
