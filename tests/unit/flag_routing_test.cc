// Tests for how lockstep_launch routes its arguments: --server_flag and
// --worker_flag, the flag tables, "did you mean", and the per-process
// flags (metrics ports, traces) in each process's command line.
#include "deploy/launch/flag_routing.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "deploy/launch/launcher.h"
#include "deploy/launch/launcher_args.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

FlagKind LauncherFlags(absl::string_view name) {
  return name == "workers" ? FlagKind::kValued : FlagKind::kUnknown;
}

TEST(SplitLauncherArgsTest, ExplicitServerAndWorkerFlagsKeepTheirOrder) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--server_flag=--step_timeout_s=9", "--lr=0.1",
       "--worker_flag=--layers=8,4", "--server_flag=--trace=a=b", "--workers=2",
       "--", "--epochs=3"},
      LauncherFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--workers=2"));
  EXPECT_THAT(split->passthrough, ElementsAre("--lr=0.1"));
  EXPECT_THAT(split->server_flags,
              ElementsAre("--step_timeout_s=9", "--trace=a=b"));
  EXPECT_THAT(split->worker_flags, ElementsAre("--layers=8,4", "--epochs=3"));
}

TEST(SplitLauncherArgsTest, ServerFlagNeedsAValue) {
  absl::StatusOr<SplitArgs> split =
      SplitLauncherArgs({"launch", "--server_flag", "--x=1"}, LauncherFlags);
  ASSERT_FALSE(split.ok());
  EXPECT_THAT(split.status().message(), HasSubstr("--server_flag=VALUE"));
}

TEST(FlagTableTest, ParsesListFlagsOutput) {
  absl::StatusOr<FlagTable> table =
      FlagTable::Parse("augment bool\nepochs value\n");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->Kind("augment"), FlagKind::kBool);
  EXPECT_EQ(table->Kind("epochs"), FlagKind::kValued);
  EXPECT_EQ(table->Kind("epoch"), FlagKind::kUnknown);
  EXPECT_TRUE(table->Takes("noaugment"));
  EXPECT_FALSE(table->Takes("noepochs"));
  EXPECT_THAT(table->Names(), ElementsAre("augment", "epochs"));
  EXPECT_FALSE(FlagTable::Parse("").ok());
  EXPECT_FALSE(FlagTable::Parse("epochs value\nERROR: something\n").ok());
  EXPECT_FALSE(FlagTable::Parse("epochs number\n").ok());
}

TEST(EditDistanceTest, CountsSingleCharacterEdits) {
  EXPECT_EQ(EditDistance("", ""), 0u);
  EXPECT_EQ(EditDistance("epochs", "epochs"), 0u);
  EXPECT_EQ(EditDistance("epoch", "epochs"), 1u);    // Insertion.
  EXPECT_EQ(EditDistance("workers", "worker"), 1u);  // Deletion.
  EXPECT_EQ(EditDistance("lr", "lt"), 1u);           // Substitution.
  EXPECT_EQ(EditDistance("checkpoint_dri", "checkpoint_dir"), 2u);
  EXPECT_EQ(EditDistance("kitten", "sitting"), 3u);
  EXPECT_EQ(EditDistance("", "abc"), 3u);
}

TEST(NearestFlagTest, SuggestsOnlyNearNames) {
  const std::vector<std::string> known = {"checkpoint_dir", "epochs", "workers",
                                          "lr"};
  EXPECT_EQ(NearestFlag("checkpoint_dri", known), "checkpoint_dir");
  EXPECT_EQ(NearestFlag("epoch", known), "epochs");
  EXPECT_EQ(NearestFlag("worker", known), "workers");
  EXPECT_EQ(NearestFlag("l", known), "lr");
  EXPECT_EQ(NearestFlag("frobnicate", known), "");
  EXPECT_EQ(NearestFlag("x", {}), "");
}

// The worker's table and the server's, as --list_flags prints them.
struct Tables {
  FlagTable worker = *FlagTable::Parse(
      "epochs value\naugment bool\nstep_timeout_s value\nlayers value\n");
  FlagTable server = *FlagTable::Parse(
      "checkpoint_dir value\nexit_when_done bool\nstep_timeout_s value\n");
};

TEST(RouteArgsTest, EachFlagGoesWhereItIsTaken) {
  Tables t;
  absl::StatusOr<RoutedArgs> routed = RouteArgs(
      {"--epochs=2", "--checkpoint_dir", "/c", "--noexit_when_done",
       "--step_timeout_s=5", "--layers", "8,4", "data.bin", "--noaugment"},
      t.server, t.worker, {"workers"});
  ASSERT_TRUE(routed.ok()) << routed.status();
  EXPECT_THAT(routed->server,
              ElementsAre("--checkpoint_dir", "/c", "--noexit_when_done"));
  // A flag both take goes to the workers, as before servers were reached.
  EXPECT_THAT(routed->worker,
              ElementsAre("--epochs=2", "--step_timeout_s=5", "--layers", "8,4",
                          "data.bin", "--noaugment"));
}

TEST(RouteArgsTest, AnUnknownFlagNamesTheNearestOfAnyBinary) {
  Tables t;
  for (const auto& [arg, nearest] :
       std::vector<std::pair<std::string, std::string>>{
           {"--checkpoint_dri=/c", "checkpoint_dir"},
           {"--epoch=3", "epochs"},
           {"--worker=2", "workers"}}) {
    absl::StatusOr<RoutedArgs> routed =
        RouteArgs({"--epochs=1", arg}, t.server, t.worker, {"workers"});
    ASSERT_FALSE(routed.ok()) << arg;
    EXPECT_EQ(routed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(routed.status().message(),
                HasSubstr("did you mean --" + nearest + "?"))
        << arg;
  }
  absl::StatusOr<RoutedArgs> far =
      RouteArgs({"--frobnicate"}, t.server, t.worker, {"workers"});
  ASSERT_FALSE(far.ok());
  EXPECT_THAT(far.status().message(), HasSubstr("unknown flag --frobnicate"));
  EXPECT_THAT(far.status().message(), testing::Not(HasSubstr("did you mean")));
}

TEST(FirstPortFlagTest, FindsAPortFlagThatIsOn) {
  EXPECT_EQ(FirstPortFlag({"--epochs=2", "--metrics_port=9100"}),
            "metrics_port");
  EXPECT_EQ(FirstPortFlag({"--health_port", "9200", "--metrics_port=1"}),
            "health_port");
  EXPECT_EQ(FirstPortFlag({"--metrics_port=0", "-health_port", "0"}), "");
  EXPECT_EQ(FirstPortFlag({"--metrics_port_base=9100", "metrics_port"}), "");
  EXPECT_EQ(FirstPortFlag({}), "");
}

TEST(PerProcessFlagsTest, PortsAndTracesPerProcess) {
  LaunchOptions options;
  options.workers = 2;
  options.ps = 2;
  options.bin_dir = "/b";
  options.metrics_port_base = 9100;
  options.health_port_base = 9200;
  options.trace_dir = "/tr";
  options.server_args = {"--checkpoint_dir=/c"};
  EXPECT_THAT(ServerArgv(options, 1, "/t/ps1.port"),
              ElementsAre("/b/lockstep_server", "--listen=127.0.0.1:0",
                          "--port_file=/t/ps1.port", "--workers=2",
                          "--exit_when_done", "--shard=1", "--num_shards=2",
                          "--metrics_port=9101", "--health_port=9201",
                          "--trace=/tr/ps1.json", "--checkpoint_dir=/c"));
  EXPECT_THAT(WorkerArgv(options, 1, "h:1"),
              ElementsAre("/b/lockstep_worker", "--servers=h:1", "--workers=2",
                          "--rank=1", "--progress=none", "--metrics_port=9103",
                          "--health_port=9203", "--trace=/tr/worker1.json"));
}

TEST(PerProcessFlagsTest, PortBasesLeaveRoomForEveryProcess) {
  LaunchOptions options;
  options.workers = 3;
  options.ps = 2;
  EXPECT_FALSE(ValidatePerProcessOptions(options).has_value());
  options.metrics_port_base = 65531;  // 65531..65535: five ports.
  EXPECT_FALSE(ValidatePerProcessOptions(options).has_value());
  options.metrics_port_base = 65532;
  std::optional<InvalidLaunchOption> invalid =
      ValidatePerProcessOptions(options);
  ASSERT_TRUE(invalid.has_value());
  EXPECT_EQ(invalid->option, "metrics_port_base");
  options.metrics_port_base = -1;
  EXPECT_TRUE(ValidatePerProcessOptions(options).has_value());
  options.metrics_port_base = 9000;
  options.health_port_base = 9004;  // 9004..9008 overlaps 9000..9004.
  invalid = ValidatePerProcessOptions(options);
  ASSERT_TRUE(invalid.has_value());
  EXPECT_EQ(invalid->option, "health_port_base");
  options.health_port_base = 9005;
  EXPECT_FALSE(ValidatePerProcessOptions(options).has_value());
  options.health_port_base = 65532;
  invalid = ValidatePerProcessOptions(options);
  ASSERT_TRUE(invalid.has_value());
  EXPECT_EQ(invalid->option, "health_port_base");
  options.health_port_base = 0;
  options.trace_dir = "/nonexistent/lockstep/traces";
  invalid = ValidatePerProcessOptions(options);
  ASSERT_TRUE(invalid.has_value());
  EXPECT_EQ(invalid->option, "trace_dir");
}

}  // namespace
}  // namespace lockstep
