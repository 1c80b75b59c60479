// What `lockstep_bench study` runs: the matrix as a list of run specs, one
// per row of the study's CSV. Pure data; the sizes and counts here are what
// keeps the full study within about ten minutes on a 2-core machine.
#ifndef LOCKSTEP_TESTS_BENCH_STUDY_MATRIX_H_
#define LOCKSTEP_TESTS_BENCH_STUDY_MATRIX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "tests/bench/study_mlp.h"
#include "tests/bench/study_report.h"

namespace lockstep {

// Hosts the largest run needs: 4 workers and 4 server shards, each on its
// own host.
inline constexpr int kStudyMaxHosts = 8;

struct RunSpec {
  StudyRow row;  // The identity columns, filled in; figures still -1.
  // comm: parameters (M = 4 x params bytes) and steps.
  int64_t params = 0;
  int warmup = 0;
  int iters = 0;
  bool colocate = false;  // PS shard i on worker i's host.
  MlpJob job;  // mlp and straggler.
};

// The test accuracy the rounds runs are timed to (Fashion-MNIST, the
// tutorial's MLP: sync PS reaches it in its second or third epoch).
inline constexpr double kRoundsTargetAccuracy = 0.85;

// The runs on `link` ("loopback" or "sim"), in the order they run: comm,
// then mlp, straggler and rounds. `data_flags` go to every MLP worker.
std::vector<RunSpec> StudyMatrix(const std::string& link, bool quick,
                                 const std::vector<std::string>& data_flags);

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_BENCH_STUDY_MATRIX_H_
