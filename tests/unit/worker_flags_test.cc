// lockstep_worker's flags turned into options (worker/app/worker_flags.cc).
#include "worker/app/worker_flags.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "common/base/env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/app/setup.h"

ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(int, rank);
ABSL_DECLARE_FLAG(int, workers);
ABSL_DECLARE_FLAG(int, gpu);
ABSL_DECLARE_FLAG(std::string, sync);
ABSL_DECLARE_FLAG(std::string, allreduce);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(std::optional<double>, lr);
ABSL_DECLARE_FLAG(std::optional<double>, momentum);
ABSL_DECLARE_FLAG(bool, nesterov);
ABSL_DECLARE_FLAG(double, beta_1);
ABSL_DECLARE_FLAG(double, beta_2);
ABSL_DECLARE_FLAG(double, epsilon);
ABSL_DECLARE_FLAG(std::optional<double>, weight_decay);
ABSL_DECLARE_FLAG(std::string, lr_schedule);
ABSL_DECLARE_FLAG(int64_t, lr_decay_steps);
ABSL_DECLARE_FLAG(double, lr_decay_rate);
ABSL_DECLARE_FLAG(bool, lr_staircase);
ABSL_DECLARE_FLAG(std::string, lr_boundaries);
ABSL_DECLARE_FLAG(std::string, lr_values);
ABSL_DECLARE_FLAG(int64_t, lr_warmup_steps);
ABSL_DECLARE_FLAG(double, lr_warmup_from);
ABSL_DECLARE_FLAG(int64_t, max_steps);
ABSL_DECLARE_FLAG(std::string, dataset);
ABSL_DECLARE_FLAG(int64_t, synthetic_examples);
ABSL_DECLARE_FLAG(std::string, standby_servers);
ABSL_DECLARE_FLAG(int, min_workers);
ABSL_DECLARE_FLAG(int, backup_workers);
ABSL_DECLARE_FLAG(std::optional<int>, local_steps);
ABSL_DECLARE_FLAG(std::optional<double>, outer_lr);
ABSL_DECLARE_FLAG(std::optional<double>, outer_momentum);
ABSL_DECLARE_FLAG(std::string, inner_state_dir);

namespace lockstep {
namespace {

using ::testing::ElementsAre;

class WorkerFlagsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    unsetenv("TF_CONFIG");
    absl::SetFlag(&FLAGS_servers, "127.0.0.1:7000,127.0.0.1:7001");
    absl::SetFlag(&FLAGS_workers, 4);
    absl::SetFlag(&FLAGS_rank, 3);
  }
  absl::FlagSaver saver_;  // Every test starts from the defaults.
};

TEST_F(WorkerFlagsTest, ServersRankAndWorkersReachTheTrainerAndClient) {
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->session.client.servers,
              ElementsAre("127.0.0.1:7000", "127.0.0.1:7001"));
  EXPECT_EQ(o->trainer.num_shards, 2);
  EXPECT_EQ(o->trainer.rank, 3);
  EXPECT_EQ(o->trainer.num_workers, 4);
  EXPECT_EQ(o->trainer.sync, SyncMode::kSync);
}

// Every optimizer flag reaches the signature the servers apply (a dropped
// one would silently train with the default); unset ones keep Keras's
// defaults for the chosen optimizer.
TEST_F(WorkerFlagsTest, OptimizerFlagsReachTheTrainer) {
  absl::SetFlag(&FLAGS_optimizer, "momentum");
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.optimizer.name, "momentum");
  EXPECT_EQ(o->trainer.optimizer.learning_rate, 0.01);
  EXPECT_EQ(o->trainer.optimizer.momentum, 0.9);
  EXPECT_FALSE(o->trainer.optimizer.nesterov);

  absl::SetFlag(&FLAGS_lr, 0.125);
  absl::SetFlag(&FLAGS_momentum, 0.75);
  absl::SetFlag(&FLAGS_nesterov, true);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.optimizer.learning_rate, 0.125);
  EXPECT_EQ(o->trainer.optimizer.momentum, 0.75);
  EXPECT_TRUE(o->trainer.optimizer.nesterov);

  absl::SetFlag(&FLAGS_optimizer, "adamw");
  absl::SetFlag(&FLAGS_beta_1, 0.5);
  absl::SetFlag(&FLAGS_beta_2, 0.25);
  absl::SetFlag(&FLAGS_epsilon, 1e-3);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.optimizer.name, "adamw");
  EXPECT_EQ(o->trainer.optimizer.weight_decay, 0.004) << "AdamW's default";
  absl::SetFlag(&FLAGS_weight_decay, 0.0625);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.optimizer.learning_rate, 0.125);
  EXPECT_EQ(o->trainer.optimizer.beta_1, 0.5);
  EXPECT_EQ(o->trainer.optimizer.beta_2, 0.25);
  EXPECT_EQ(o->trainer.optimizer.epsilon, 1e-3);
  EXPECT_EQ(o->trainer.optimizer.weight_decay, 0.0625);

  absl::SetFlag(&FLAGS_optimizer, "rmsprop");
  EXPECT_THAT(WorkerOptionsFromFlags().status().message(),
              ::testing::HasSubstr("--optimizer must be sgd, momentum, adam "
                                   "or adamw, got \"rmsprop\""));
}

// The schedule flags reach the optimizer's config, checked, with errors
// that name the flag.
TEST_F(WorkerFlagsTest, ScheduleFlagsReachTheOptimizer) {
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_TRUE(o->trainer.optimizer.schedule == LrSchedule());

  absl::SetFlag(&FLAGS_lr_schedule, "exponential");
  absl::SetFlag(&FLAGS_lr_decay_steps, 100);
  absl::SetFlag(&FLAGS_lr_decay_rate, 0.5);
  absl::SetFlag(&FLAGS_lr_staircase, true);
  absl::SetFlag(&FLAGS_lr_warmup_steps, 10);
  absl::SetFlag(&FLAGS_lr_warmup_from, 0.25);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  const LrSchedule& s = o->trainer.optimizer.schedule;
  EXPECT_EQ(s.kind, "exponential");
  EXPECT_EQ(s.decay_steps, 100);
  EXPECT_EQ(s.decay_rate, 0.5);
  EXPECT_TRUE(s.staircase);
  EXPECT_EQ(s.warmup_steps, 10);
  EXPECT_EQ(s.warmup_from, 0.25);

  absl::SetFlag(&FLAGS_lr_schedule, "piecewise");
  EXPECT_EQ(WorkerOptionsFromFlags().status().message(),
            "--lr_decay_steps is not used by this kind (piecewise schedule)");
  absl::SetFlag(&FLAGS_lr_decay_steps, 0);
  absl::SetFlag(&FLAGS_lr_decay_rate, 0);
  absl::SetFlag(&FLAGS_lr_staircase, false);
  absl::SetFlag(&FLAGS_lr_boundaries, "100,x");
  EXPECT_THAT(WorkerOptionsFromFlags().status().message(),
              ::testing::HasSubstr("--lr_boundaries: \"x\" is not a number"));
  absl::SetFlag(&FLAGS_lr_boundaries, "100,200");
  absl::SetFlag(&FLAGS_lr_values, "0.5,0.25,0.125");
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->trainer.optimizer.schedule.boundaries, ElementsAre(100, 200));
  EXPECT_THAT(o->trainer.optimizer.schedule.values,
              ElementsAre(0.5, 0.25, 0.125));
  absl::SetFlag(&FLAGS_lr, 0.125);
  EXPECT_EQ(WorkerOptionsFromFlags().status().message(),
            "--lr is not used with --lr_schedule=piecewise: --lr_values gives "
            "the rates");
  absl::SetFlag(&FLAGS_lr_schedule, "step");
  EXPECT_THAT(WorkerOptionsFromFlags().status().message(),
              ::testing::HasSubstr("--lr_schedule must be constant, "
                                   "exponential, piecewise or cosine"));
}

// The launcher gives each worker --gpu=rank % GPUs. With NCCL the
// communicator must sit on that GPU too: NCCL refuses two ranks on one GPU.
TEST_F(WorkerFlagsTest, NcclRanksUseTheWorkersGpu) {
  absl::SetFlag(&FLAGS_gpu, 3);
  absl::SetFlag(&FLAGS_sync, "allreduce");
  absl::SetFlag(&FLAGS_allreduce, "nccl");
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.sync, SyncMode::kAllReduce);
  EXPECT_EQ(o->session.reducer.backend, "nccl");
  EXPECT_EQ(o->device.gpu, 3);
  EXPECT_EQ(o->session.reducer.gpu, 3);
  EXPECT_EQ(o->session.reducer.rank, 3);
  EXPECT_EQ(o->session.reducer.size, 4);
  EXPECT_EQ(o->session.reducer.coordinator, "127.0.0.1:7000");
}

TEST_F(WorkerFlagsTest, AnUnknownSyncModeIsRefused) {
  absl::SetFlag(&FLAGS_sync, "gossip");
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(o.status().message()),
              ::testing::HasSubstr("--sync must be ps, allreduce, async, ssp, "
                                   "localsgd or diloco, got \"gossip\""));
}

// The message of WorkerOptionsFromFlags' refusal; fails the test if it
// accepted.
std::string Refusal() {
  const absl::Status s = WorkerOptionsFromFlags().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  return std::string(s.message());
}

TEST_F(WorkerFlagsTest, StandbyServersAreOnePerShardAndNotElastic) {
  absl::SetFlag(&FLAGS_standby_servers, "127.0.0.1:7100,127.0.0.1:7101");
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_THAT(o->session.client.standby_servers,
              ElementsAre("127.0.0.1:7100", "127.0.0.1:7101"));
  absl::SetFlag(&FLAGS_min_workers, 2);
  EXPECT_THAT(Refusal(),
              ::testing::HasSubstr("--standby_servers and an elastic job"));
  absl::SetFlag(&FLAGS_min_workers, 0);
  absl::SetFlag(&FLAGS_standby_servers, "127.0.0.1:7100");
  EXPECT_THAT(Refusal(),
              ::testing::HasSubstr("--standby_servers needs one standby per "
                                   "shard: 2 server(s), 1 standby(s)"));
}

// --sync=localsgd and diloco: synchronous PS rounds of --local_steps, the
// job's optimizer on the workers and the outer one (averaging, or Nesterov
// momentum with the paper's defaults) on the servers.
TEST_F(WorkerFlagsTest, LocalStepsModesSetTheRoundsAndTheOuterOptimizer) {
  absl::SetFlag(&FLAGS_sync, "diloco");
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.sync, SyncMode::kSync);
  EXPECT_EQ(o->session.local_steps, 10);
  EXPECT_EQ(o->session.outer_optimizer.name, "momentum");
  EXPECT_EQ(o->session.outer_optimizer.learning_rate, 0.7);
  EXPECT_EQ(o->session.outer_optimizer.momentum, 0.9);
  EXPECT_TRUE(o->session.outer_optimizer.nesterov);
  EXPECT_EQ(o->trainer.optimizer.name, "adam");  // The inner one.

  absl::SetFlag(&FLAGS_sync, "localsgd");
  absl::SetFlag(&FLAGS_local_steps, 50);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->session.local_steps, 50);
  EXPECT_EQ(o->session.outer_optimizer.name, "sgd");
  EXPECT_EQ(o->session.outer_optimizer.learning_rate, 1.0);

  absl::SetFlag(&FLAGS_outer_momentum, 0.5);
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--outer_momentum needs "
                                              "diloco"));
  absl::SetFlag(&FLAGS_outer_momentum, std::nullopt);
  absl::SetFlag(&FLAGS_local_steps, 1);
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--local_steps must be in [2, "
                                              "1000000], got 1"));
  absl::SetFlag(&FLAGS_local_steps, 10);
  absl::SetFlag(&FLAGS_sync, "diloco");
  absl::SetFlag(&FLAGS_outer_lr, 0.0);
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--outer_lr must be positive"));
  absl::SetFlag(&FLAGS_outer_lr, std::nullopt);
  // Elastic rounds: members cover absent ranks' batches.
  absl::SetFlag(&FLAGS_min_workers, 2);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->session.group.min_workers, 2);
  EXPECT_EQ(o->session.local_steps, 10);
  absl::SetFlag(&FLAGS_backup_workers, 1);
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("localsgd or diloco without "
                                              "--backup_workers"));
  absl::SetFlag(&FLAGS_backup_workers, 0);
  absl::SetFlag(&FLAGS_min_workers, 0);
  // The inner state's folder: made, and checked at start.
  const std::string dir = ::testing::TempDir() + "/inner-flags/state";
  absl::SetFlag(&FLAGS_inner_state_dir, dir);
  o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->session.inner_state_dir, dir);
  EXPECT_TRUE(Env::Default()->Stat(dir).ok()) << "made at start";
  absl::SetFlag(&FLAGS_inner_state_dir, "/proc/self");
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--inner_state_dir: cannot "
                                              "write"));
  // Given to a mode without rounds, they would be silently ignored.
  absl::SetFlag(&FLAGS_sync, "ps");
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--local_steps, --outer_lr, "
                                              "--outer_momentum and "
                                              "--inner_state_dir need "
                                              "--sync=localsgd"));
  absl::SetFlag(&FLAGS_local_steps, std::nullopt);
  EXPECT_THAT(Refusal(), ::testing::HasSubstr("--inner_state_dir need"));
}

// -1 and nan once stood for "the optimizer's default" (any value < 0 did):
// unset is the default now, and every value given is checked.
TEST_F(WorkerFlagsTest, OptimizerValuesOutOfRangeAreRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  absl::SetFlag(&FLAGS_optimizer, "adamw");
  for (const auto& [lr, text] : {std::pair{-1.0, "-1"}, std::pair{nan, "nan"},
                                 std::pair{inf, "inf"}, std::pair{0.0, "0"}}) {
    absl::SetFlag(&FLAGS_lr, lr);
    EXPECT_EQ(Refusal(),
              absl::StrCat("--lr must be finite and > 0, got ", text));
  }
  absl::SetFlag(&FLAGS_lr, std::nullopt);
  for (const auto& [momentum, text] :
       {std::pair{-1.0, "-1"}, std::pair{1.0, "1"}, std::pair{nan, "nan"}}) {
    absl::SetFlag(&FLAGS_momentum, momentum);
    EXPECT_EQ(Refusal(),
              absl::StrCat("--momentum must be in [0, 1), got ", text));
  }
  absl::SetFlag(&FLAGS_momentum, std::nullopt);
  for (const auto& [decay, text] :
       {std::pair{-0.5, "-0.5"}, std::pair{nan, "nan"},
        std::pair{inf, "inf"}}) {
    absl::SetFlag(&FLAGS_weight_decay, decay);
    EXPECT_EQ(
        Refusal(),
        absl::StrCat("--weight_decay must be finite and >= 0, got ", text));
  }
  // The ends of the ranges that are in them.
  absl::SetFlag(&FLAGS_lr, 1e-30);
  absl::SetFlag(&FLAGS_momentum, 0.0);
  absl::SetFlag(&FLAGS_weight_decay, 0.0);
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.optimizer.learning_rate, 1e-30);
  EXPECT_EQ(o->trainer.optimizer.momentum, 0.0);
  EXPECT_EQ(o->trainer.optimizer.weight_decay, 0.0) << "not AdamW's 0.004";
}

TEST_F(WorkerFlagsTest, NegativeMaxStepsIsRefused) {
  absl::SetFlag(&FLAGS_max_steps, -3);
  EXPECT_EQ(Refusal(), "--max_steps must be >= 0 (0: no limit), got -3");
  absl::SetFlag(&FLAGS_max_steps, 0);
  absl::StatusOr<WorkerMainOptions> o = WorkerOptionsFromFlags();
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->trainer.max_steps, 0);
}

// 2e9 examples of 784 values once ended in std::bad_alloc (exit 134).
TEST_F(WorkerFlagsTest, SyntheticExamplesMustFitInMemory) {
  absl::SetFlag(&FLAGS_dataset, "synthetic");
  absl::SetFlag(&FLAGS_synthetic_examples, 2'000'000'000);
  EXPECT_THAT(Refusal(), ::testing::MatchesRegex(
                             "--synthetic_examples must be in \\[1, [0-9]+\\] "
                             "\\(with a test set of a fifth, at 3140 bytes an "
                             "example: half of this machine's memory\\), got "
                             "2000000000"));
  absl::SetFlag(&FLAGS_synthetic_examples, 0);
  EXPECT_THAT(Refusal(), ::testing::EndsWith("got 0"));
  absl::SetFlag(&FLAGS_synthetic_examples, 6400);
  EXPECT_TRUE(WorkerOptionsFromFlags().ok());
}

// The bound, by hand: 1 GiB holds 536870912 / 3140 = 170977 examples of 784
// floats and a label; 142481 and their fifth (28496) make 170977, 142482
// one more. Image models take twice (the draw, then its two copies):
// (3072 * 4 + 4) * 2 = 24584 bytes, 21838 examples, 18199 + 3639.
TEST(SyntheticExamplesTest, TheMostFillHalfTheMemory) {
  constexpr int64_t kGiB = int64_t{1} << 30;
  ModelSpec mlp;
  mlp.input = {1, 1, 784};
  EXPECT_EQ(MaxSyntheticExamples(mlp, kGiB), 142481);
  EXPECT_TRUE(CheckSyntheticExamples(142481, mlp, kGiB).ok());
  EXPECT_TRUE(CheckSyntheticExamples(1, mlp, kGiB).ok());
  EXPECT_EQ(CheckSyntheticExamples(142482, mlp, kGiB).message(),
            "--synthetic_examples must be in [1, 142481] (with a test set of "
            "a fifth, at 3140 bytes an example: half of this machine's "
            "memory), got 142482");
  EXPECT_EQ(CheckSyntheticExamples(-1, mlp, kGiB).code(),
            absl::StatusCode::kInvalidArgument);
  ModelSpec resnet;
  resnet.name = "resnet20";
  resnet.input = {32, 32, 3};
  EXPECT_EQ(MaxSyntheticExamples(resnet, kGiB), 18199);
  // A tiny memory: 500 bytes hold 13 examples of 8 values (36 bytes): 11
  // and their fifth (2) make 13, 12 would make 14.
  ModelSpec small;
  small.input = {1, 1, 8};
  EXPECT_EQ(MaxSyntheticExamples(small, 1000), 11);
  // Memory unknown (0): only int64 bounds the bytes.
  // (2^63 - 1) / 36 = 256204778801521550 made, 213503982334601292 trained.
  EXPECT_EQ(MaxSyntheticExamples(small, 0), 213503982334601292);
}

}  // namespace
}  // namespace lockstep
