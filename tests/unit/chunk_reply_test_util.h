// Helpers shared by the tests of ChunkBarrier and ParameterServer: fp32
// bytes of a vector, and a callback that records what it received.
#ifndef LOCKSTEP_TESTS_UNIT_CHUNK_REPLY_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_CHUNK_REPLY_TEST_UTIL_H_

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/core/chunk_barrier.h"

namespace lockstep {

// The bytes of `v` as the wire carries fp32 (v must outlive them).
inline absl::string_view Bytes(const std::vector<float>& v) {
  return absl::string_view(reinterpret_cast<const char*>(v.data()),
                           v.size() * sizeof(float));
}

// Records what a ChunkCallback received.
struct Reply {
  std::optional<absl::StatusOr<ChunkSnapshot>> result;
  ChunkCallback Callback() {
    return [this](absl::StatusOr<ChunkSnapshot> r) { result = std::move(r); };
  }
  bool ok() const { return result.has_value() && result->ok(); }
  std::vector<float> values() const { return *(*result)->values; }
  int64_t version() const { return (*result)->version; }
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_CHUNK_REPLY_TEST_UTIL_H_
