// lockstep_worker's flags turned into options (worker/app/worker_flags.cc).
#include "worker/app/worker_flags.h"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

ABSL_DECLARE_FLAG(std::string, servers);
ABSL_DECLARE_FLAG(int, rank);
ABSL_DECLARE_FLAG(int, workers);
ABSL_DECLARE_FLAG(int, gpu);
ABSL_DECLARE_FLAG(std::string, sync);
ABSL_DECLARE_FLAG(std::string, allreduce);
ABSL_DECLARE_FLAG(std::string, optimizer);
ABSL_DECLARE_FLAG(double, lr);
ABSL_DECLARE_FLAG(double, momentum);
ABSL_DECLARE_FLAG(bool, nesterov);
ABSL_DECLARE_FLAG(double, beta_1);
ABSL_DECLARE_FLAG(double, beta_2);
ABSL_DECLARE_FLAG(double, epsilon);
ABSL_DECLARE_FLAG(double, weight_decay);
ABSL_DECLARE_FLAG(std::string, lr_schedule);
ABSL_DECLARE_FLAG(int64_t, lr_decay_steps);
ABSL_DECLARE_FLAG(double, lr_decay_rate);
ABSL_DECLARE_FLAG(bool, lr_staircase);
ABSL_DECLARE_FLAG(std::string, lr_boundaries);
ABSL_DECLARE_FLAG(std::string, lr_values);
ABSL_DECLARE_FLAG(int64_t, lr_warmup_steps);
ABSL_DECLARE_FLAG(double, lr_warmup_from);

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
              ::testing::HasSubstr("--sync must be ps, allreduce, async or "
                                   "ssp, got \"gossip\""));
}

}  // namespace
}  // namespace lockstep
