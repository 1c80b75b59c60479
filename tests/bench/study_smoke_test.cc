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
  // BytePS with k extra hosts: k = 0 is the ring's time, k = n is M/B.
  EXPECT_DOUBLE_EQ(BytePsModelSeconds(4, 0, m, b), 0.12);
  EXPECT_DOUBLE_EQ(BytePsModelSeconds(4, 4, m, b), 0.08);
  // n = 4, k = 2: 2 * 4 * 3 M / ((16 + 8 - 4) B) = 1.2 M/B.
  EXPECT_DOUBLE_EQ(BytePsModelSeconds(4, 2, m, b), 0.096);
}

TEST(StudyCostModelTest, HeadersAndTheLastChunksRepliesAreAdded) {
  const double m = 10e6, rate = 125e6, c = 262144;
  const double b = rate * kLinkPayloadShare;
  // Dedicated shards: the bandwidth term over the payload rate, plus the
  // n replies of the last chunk.
  EXPECT_DOUBLE_EQ(PsModelWithChunksSeconds(4, 4, false, m, c, rate),
                   m / b + 4 * c / b);
  EXPECT_DOUBLE_EQ(PsModelWithChunksSeconds(4, 1, false, m, c, rate),
                   4 * m / b + 4 * c / b);
  // A chunk is never larger than a shard's share.
  EXPECT_DOUBLE_EQ(PsModelWithChunksSeconds(2, 2, false, m, 8e6, rate),
                   m / b + 2 * (m / 2) / b);
  // Colocated, k = n: the ring's 2 (n - 1) M / n, plus n - 1 replies.
  EXPECT_DOUBLE_EQ(PsModelWithChunksSeconds(4, 4, true, m, c, rate),
                   1.5 * m / b + 3 * c / b);
  EXPECT_DOUBLE_EQ(RingModelWithHeadersSeconds(4, m, rate), 1.5 * m / b);
}

TEST(StudyCostModelTest, CrossoverPairsEachPsRunWithItsAllReduce) {
  StudyRow ps, gloo, ring, other;
  ps.link = gloo.link = ring.link = other.link = "sim";
  ps.kind = gloo.kind = ring.kind = other.kind = "comm";
  ps.mode = "ps";
  gloo.mode = "gloo";
  ring.mode = "grpc-ring";
  other.mode = "gloo";
  ps.workers = gloo.workers = ring.workers = other.workers = 4;
  ps.model_bytes = gloo.model_bytes = ring.model_bytes = 10'000'000;
  other.model_bytes = 40'000'000;
  ps.median_step_s = 0.1;
  gloo.median_step_s = 0.12;
  ring.median_step_s = 0.15;
  other.median_step_s = 0.01;
  const std::vector<StudyRow> rows = {other, ps, gloo, ring};
  const std::vector<Crossover> x = Crossovers(rows);
  ASSERT_EQ(x.size(), 1u);
  EXPECT_EQ(x[0].ps, &rows[1]);
  EXPECT_DOUBLE_EQ(x[0].gloo_s, 0.12);
  EXPECT_DOUBLE_EQ(x[0].ring_s, 0.15);
  EXPECT_TRUE(x[0].beats_gloo());
}

TEST(StudyCostModelTest, ChecksOnlySimulatedLargeCommRuns) {
  StudyRow held;
  held.link = "sim";
  held.kind = "comm";
  held.model_bytes = 10'000'000;
  held.median_step_s = 0.09;
  held.model_step_s = 0.08;
  StudyRow missed = held;
  missed.median_step_s = 0.093;  // 1.1625: over the 15% line.
  StudyRow small = held;
  small.model_bytes = 400'000;
  StudyRow loopback = held;
  loopback.link = "loopback";
  const std::vector<StudyRow> rows = {held, missed, small, loopback};
  const std::vector<ModelCheck> checks = ModelChecks(rows);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_TRUE(checks[0].held);
  EXPECT_FALSE(checks[1].held);
  EXPECT_DOUBLE_EQ(checks[1].ratio, 1.1625);
}

std::vector<std::vector<std::string>> ReadCsv(const std::string& path) {
  std::vector<std::vector<std::string>> rows;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    rows.push_back(absl::StrSplit(line, ','));
  }
  return rows;
}

// The index of column `name` in `header`; 0, with a failure, if none.
size_t Column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == name) return i;
  }
  ADD_FAILURE() << "no column " << name;
  return size_t{0};
}

// What the quick study's rows hold, counted.
struct RowCounts {
  std::multiset<std::string> kinds, modes, placements;
};

// Row i of study.csv (csv[0] is the header) as a quick study on loopback
// writes it; its kind, kind/mode and placement go into *counts.
void ExpectQuickRow(const std::vector<std::vector<std::string>>& csv, size_t i,
                    RowCounts* counts) {
  const std::vector<std::string>& header = csv[0];
  auto column = [&](const std::string& name) { return Column(header, name); };
  ASSERT_EQ(csv[i].size(), header.size()) << "row " << i;
  counts->kinds.insert(csv[i][column("kind")]);
  counts->modes.insert(csv[i][column("kind")] + "/" + csv[i][column("mode")]);
  EXPECT_EQ(csv[i][column("link")], "loopback");
  EXPECT_EQ(csv[i][column("status")], "ok");
  EXPECT_GT(std::stod(csv[i][column("median_step_s")]), 0) << "row " << i;
  // No cost model on loopback.
  EXPECT_EQ(csv[i][column("model_step_s")], "") << "row " << i;
  const bool ps_comm =
      csv[i][column("kind")] == "comm" && csv[i][column("mode")] == "ps";
  counts->placements.insert(csv[i][column("placement")]);
  if (ps_comm) {
    // 10,000 parameters: 40 KB, one chunk per shard (auto).
    EXPECT_EQ(csv[i][column("chunk_bytes")], "4194304") << "row " << i;
  } else {
    EXPECT_EQ(csv[i][column("placement")], "") << "row " << i;
  }
  if (csv[i][column("kind")] == "comm") {
    const std::string& busy = csv[i][column("cpu_busy")];
    if (busy.empty()) {
      // Left out only when /proc/stat's clock (a few ms a tick) did not
      // advance over the timed steps: a window that short.
      EXPECT_LT(std::stod(csv[i][column("median_step_s")]) *
                    std::stod(csv[i][column("steps")]),
                0.1)
          << "row " << i;
    } else {
      EXPECT_GE(std::stod(busy), 0) << "row " << i;
      EXPECT_LE(std::stod(busy), 1) << "row " << i;
    }
  }
}

// Every MLP run of study.csv left its per-step log: 10 steps for the loss
// curves.
void ExpectStepLogs(const std::string& dir,
                    const std::vector<std::vector<std::string>>& csv) {
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
    if (csv[i][Column(csv[0], "kind")] != "mlp") continue;
    EXPECT_EQ(runs.count(csv[i][Column(csv[0], "run_id")]), 10u);
  }
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
  // Quick matrix: ps k=1, ps k=2 on shards of their own and k=2 colocated,
  // gloo and grpc-ring with synthetic gradients; the MLP with ps and gloo;
  // a straggler without and with a backup worker.
  RowCounts counts;
  for (size_t i = 1; i < csv.size(); ++i) {
    ASSERT_NO_FATAL_FAILURE(ExpectQuickRow(csv, i, &counts));
  }
  EXPECT_EQ(counts.kinds.count("comm"), 5u);
  EXPECT_EQ(counts.placements.count("dedicated"), 2u);
  EXPECT_EQ(counts.placements.count("colocated"), 1u);
  EXPECT_EQ(counts.kinds.count("mlp"), 2u);
  EXPECT_EQ(counts.kinds.count("straggler"), 2u);
  // DiLoCo in rounds of 2: its accuracy, and no link counters on loopback.
  EXPECT_EQ(counts.modes.count("rounds/diloco"), 1u);
  for (size_t i = 1; i < csv.size(); ++i) {
    if (csv[i][Column(csv[0], "kind")] != "rounds") continue;
    EXPECT_EQ(csv[i][Column(csv[0], "local_steps")], "2");
    EXPECT_EQ(csv[i][Column(csv[0], "target_accuracy")], "0.85");
    EXPECT_GT(std::stod(csv[i][Column(csv[0], "test_accuracy")]), 0);
    EXPECT_EQ(csv[i][Column(csv[0], "tx_bytes_per_worker")], "");
  }
  EXPECT_EQ(counts.modes.count("comm/ps"), 3u);
  EXPECT_EQ(counts.modes.count("comm/gloo"), 1u);
  EXPECT_EQ(counts.modes.count("comm/grpc-ring"), 1u);
  EXPECT_EQ(counts.modes.count("mlp/gloo"), 1u);
  ASSERT_NO_FATAL_FAILURE(ExpectStepLogs(dir, csv));

  const std::string json = ReadFile(dir + "/study.json");
  for (const char* key :
       {"\"study\"", "\"runs\"", "\"model_checks\"", "\"crossover\"",
        "\"median_step_s\"", "\"bandwidth_model_s\"", "\"placement\"",
        "\"client_wait_s\"", "\"final_loss\"", "\"load_average_start\"",
        "\"sim_cc\""}) {
    EXPECT_NE(json.find(key), std::string::npos) << key << " in " << json;
  }
  EXPECT_TRUE(FindJsonNumber(json, {"study", "cpus"}).ok());
  EXPECT_NE(run.output.find("cost-model check"), std::string::npos);
}

}  // namespace
}  // namespace lockstep
