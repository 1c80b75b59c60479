// Checks that `lockstep_bench study --quick` runs its matrix on loopback and
// writes the rows and columns it promises. It asserts no timing: figures
// only have to be there and positive. Also pins the cost model's formulas.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/bench/bench_util.h"
#include "tests/bench/study_report.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

const std::string kBench = std::string(LOCKSTEP_BIN_DIR) + "/lockstep_bench";

TEST(StudyCostModelTest, MatchesTheFormulas) {
  const double m = 10e6, b = 125e6;  // 10 MB over 1 Gbit/s: 0.08 s.
  EXPECT_DOUBLE_EQ(RingAllReduceModelSeconds(2, m, b), 0.08);  // M/B
  EXPECT_DOUBLE_EQ(RingAllReduceModelSeconds(4, m, b), 0.12);  // 1.5 M/B
  EXPECT_EQ(RingAllReduceModelSeconds(1, m, b), 0);
  EXPECT_DOUBLE_EQ(PsModelSeconds(4, 1, m, b), 0.32);  // n M/B
  EXPECT_DOUBLE_EQ(PsModelSeconds(4, 2, m, b), 0.16);
  EXPECT_DOUBLE_EQ(PsModelSeconds(4, 4, m, b), 0.08);  // M/B
  EXPECT_DOUBLE_EQ(PsModelSeconds(2, 4, m, b), 0.08);  // Never below M/B.
}

TEST(StudyCostModelTest, ChecksOnlySimulatedLargeCommRuns) {
  StudyRow held;
  held.link = "sim";
  held.kind = "comm";
  held.model_bytes = 10'000'000;
  held.median_step_s = 0.09;
  held.model_step_s = 0.08;
  StudyRow missed = held;
  missed.median_step_s = 0.2;
  StudyRow small = held;
  small.model_bytes = 400'000;
  StudyRow loopback = held;
  loopback.link = "loopback";
  const std::vector<StudyRow> rows = {held, missed, small, loopback};
  const std::vector<ModelCheck> checks = ModelChecks(rows);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_TRUE(checks[0].held);
  EXPECT_FALSE(checks[1].held);
  EXPECT_DOUBLE_EQ(checks[1].ratio, 2.5);
}

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

TEST(StudySmokeTest, QuickStudyWritesEveryRowAndColumn) {
  const std::string dir = MakeTempDir() + "/study";
  const RunResult run =
      RunProcess({kBench, "study", "--quick", "--links=loopback", "--noplots",
                  "--out_dir=" + dir, "--timeout_s=60"},
                 {}, absl::Seconds(120));
  ASSERT_EQ(run.exit_code, 0) << run.output;

  const std::vector<std::vector<std::string>> csv = ReadCsv(dir + "/study.csv");
  ASSERT_FALSE(csv.empty());
  EXPECT_EQ(csv[0], StudyColumns());
  std::vector<std::string> header = csv[0];
  auto column = [&](const std::string& name) {
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i] == name) return i;
    }
    ADD_FAILURE() << "no column " << name;
    return size_t{0};
  };
  // Quick matrix: ps k=1, ps k=2, gloo and grpc-ring with synthetic
  // gradients; the MLP with ps and gloo; a straggler without and with a
  // backup worker.
  std::multiset<std::string> kinds, modes;
  for (size_t i = 1; i < csv.size(); ++i) {
    ASSERT_EQ(csv[i].size(), header.size()) << "row " << i;
    kinds.insert(csv[i][column("kind")]);
    modes.insert(csv[i][column("kind")] + "/" + csv[i][column("mode")]);
    EXPECT_EQ(csv[i][column("link")], "loopback");
    EXPECT_EQ(csv[i][column("status")], "ok");
    EXPECT_GT(std::stod(csv[i][column("median_step_s")]), 0) << "row " << i;
    // No cost model on loopback.
    EXPECT_EQ(csv[i][column("model_step_s")], "") << "row " << i;
  }
  EXPECT_EQ(kinds.count("comm"), 4u);
  EXPECT_EQ(kinds.count("mlp"), 2u);
  EXPECT_EQ(kinds.count("straggler"), 2u);
  EXPECT_EQ(modes.count("comm/ps"), 2u);
  EXPECT_EQ(modes.count("comm/gloo"), 1u);
  EXPECT_EQ(modes.count("comm/grpc-ring"), 1u);
  EXPECT_EQ(modes.count("mlp/gloo"), 1u);

  // Every MLP run left its per-step log: 10 steps for the loss curves.
  const std::vector<std::vector<std::string>> steps =
      ReadCsv(dir + "/study_steps.csv");
  ASSERT_FALSE(steps.empty());
  EXPECT_EQ(steps[0],
            (std::vector<std::string>{"run_id", "step", "seconds", "loss"}));
  std::multiset<std::string> runs;
  for (size_t i = 1; i < steps.size(); ++i) {
    ASSERT_EQ(steps[i].size(), 4u);
    runs.insert(steps[i][0]);
    EXPECT_GT(std::stod(steps[i][3]), 0);
  }
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i][column("kind")] != "mlp") continue;
    EXPECT_EQ(runs.count(csv[i][column("run_id")]), 10u);
  }

  const std::string json = ReadFile(dir + "/study.json");
  for (const char* key :
       {"\"study\"", "\"runs\"", "\"model_checks\"", "\"median_step_s\"",
        "\"client_wait_s\"", "\"final_loss\"", "\"load_average_start\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  EXPECT_TRUE(FindJsonNumber(json, {"study", "cpus"}).ok());
  EXPECT_NE(run.output.find("cost-model check"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
