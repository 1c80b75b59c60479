// `lockstep_ctl merge-traces`: several Chrome trace-event files (one per
// process, from --trace) into one that Perfetto or chrome://tracing opens
// at once. Every Lockstep trace stamps events with the realtime clock in
// microseconds, so merged processes line up on one time axis.
#ifndef LOCKSTEP_SERVER_CTL_TRACE_MERGE_H_
#define LOCKSTEP_SERVER_CTL_TRACE_MERGE_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace lockstep {

// Merges `files` ((name, contents) pairs; each the object form
// {"traceEvents": [...]} or a bare array of events) into one document in
// the object form. A process id that an earlier file already used is
// renumbered in the later file (processes on different hosts may share
// one). INVALID_ARGUMENT naming the file when one is not a trace.
absl::StatusOr<std::string> MergeTraces(
    const std::vector<std::pair<std::string, std::string>>& files);

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_CTL_TRACE_MERGE_H_
