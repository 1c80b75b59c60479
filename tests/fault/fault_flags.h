// What the fault tests share: the workers' flags of a run long enough to
// interrupt, and the fault-free result to compare with.
#ifndef LOCKSTEP_TESTS_FAULT_FAULT_FLAGS_H_
#define LOCKSTEP_TESTS_FAULT_FAULT_FLAGS_H_

#include <functional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/fault/job.h"

namespace lockstep {

// A run long enough to interrupt: 40 steps, rank 1 a little slow so that a
// signal lands mid-job.
inline const std::vector<std::string> kWorkerFlags = {
    "--dataset=synthetic",  "--synthetic_examples=640",
    "--layers=23,17,5",     "--optimizer=adam",
    "--batch_size=8",       "--max_steps=40",
    "--epochs=3",           "--seed=11",
    "--chunk_bytes=700",    "--progress=none",
    "--rejoin_timeout_s=60"};

inline std::vector<std::string> Flags(std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = kWorkerFlags;
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

// Rank 0's final weights after a fault-free job of `workers`: the server
// started with `server_flags`, rank r with flags(r).
inline std::vector<float> FaultFreeWeights(
    int workers, const std::vector<std::string>& server_flags,
    const std::function<std::vector<std::string>(int)>& flags) {
  Job job(workers);
  job.StartServer(server_flags);
  for (int r = 0; r < workers; ++r) job.StartWorker(r, flags(r));
  for (int r = 0; r < workers; ++r) {
    EXPECT_EQ(job.WaitWorker(r), 0) << job.WorkerOutput(r);
  }
  EXPECT_EQ(job.WaitServer(), 0) << job.ServerOutput();
  return job.Weights(0);
}

// The fault-free result of two workers with Flags(), computed once.
inline const std::vector<float>& Reference() {
  static const std::vector<float>* reference = new std::vector<float>(
      FaultFreeWeights(2, {}, [](int) { return Flags(); }));
  return *reference;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_FAULT_FAULT_FLAGS_H_
