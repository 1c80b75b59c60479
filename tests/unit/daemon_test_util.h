// What the tests of the Daemon's parts share: a fresh folder, a shard's
// checkpoint whose values are known, a core of two workers on a fake
// clock, and a log that keeps its lines.
#ifndef LOCKSTEP_TESTS_UNIT_DAEMON_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_DAEMON_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "common/base/env.h"
#include "gtest/gtest.h"
#include "server/core/checkpoint.h"
#include "server/core/parameter_server.h"
#include "server/daemon/daemon_log.h"
#include "tests/unit/parameter_server_test_util.h"

namespace lockstep {

// A new, empty folder under the test's temporary folder.
inline std::string NewTempDir() {
  std::string dir = ::testing::TempDir() + "/daemon.XXXXXX";
  if (mkdtemp(dir.data()) == nullptr) std::abort();
  return dir;
}

// The weights of SmallSignature's model at `version`: they differ between
// versions.
inline std::vector<float> WeightsAt(int64_t version) {
  const float v = static_cast<float>(version);
  return {v, v + 0.5f, -v, 2.0f * v, 0.25f};
}

// Shard 0 of 1 of a two-worker job of SmallSignature at `version`.
inline ShardCheckpoint CheckpointAt(int64_t version) {
  ShardCheckpoint c;
  c.signature = SmallSignature(2);
  c.num_workers = 2;
  c.version = version;
  ChunkState chunk;
  chunk.version = version;
  chunk.weights = WeightsAt(version);
  c.chunks.push_back(chunk);
  return c;
}

// A core for two workers on `env`'s clock (not owned).
inline std::unique_ptr<ParameterServer> TwoWorkerCore(Env* env) {
  ParameterServerOptions options;
  options.num_workers = 2;
  options.env = env;
  absl::StatusOr<std::unique_ptr<ParameterServer>> core =
      ParameterServer::Create(options);
  if (!core.ok()) std::abort();
  return *std::move(core);
}

// A DaemonLog that keeps the lines (one thread at a time).
struct LogLines {
  std::vector<std::string> lines;
  DaemonLog Log() {
    return [this](const std::string& line) { lines.push_back(line); };
  }
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_DAEMON_TEST_UTIL_H_
