// The push window: how many pushes a worker keeps out to each shard at
// once (PsClientOptions::max_pushes_in_flight), its `auto` choice and its
// flag's syntax.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_WINDOW_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_WINDOW_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/wire/wire_codec.h"

namespace lockstep {

// PsClientOptions::max_pushes_in_flight's default: AutoPushWindow's.
inline constexpr int kAutoPushWindow = -1;

// The push window `auto` picks for a job of `num_workers` whose largest
// chunk is `chunk_wire_bytes` on the wire: as many pushes per worker as keep
// every worker's pushes at a shard within 32 MiB, at least 1 and at most 4
// (4 MiB chunks: 2 workers 4, 4 workers 2, 8 or more 1). Measured in
// docs/benchmarks.md: with 8 workers a window of 1 is both faster and 30%
// lighter on the server than 4; with 2 workers 1 is slower.
int AutoPushWindow(int num_workers, int64_t chunk_wire_bytes);

// The window a client uses: `requested`, or AutoPushWindow's choice for
// chunks of `chunk_elements` values sent as `dtype` when it is
// kAutoPushWindow.
int ResolvePushWindow(int requested, int num_workers, int64_t chunk_elements,
                      WireDType dtype);

// "auto" (kAutoPushWindow) or a count >= 0, as the --push_window flags take
// it; INVALID_ARGUMENT otherwise.
absl::StatusOr<int> ParsePushWindow(absl::string_view text);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_WINDOW_H_
