// --help of every binary (grouped by topic, common/flags/flag_help.h),
// --list_flags, --validate_only, and deploy/local/train.sh --help, through
// real processes.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/base/exit_codes.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/subprocess.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

const std::string kBin = LOCKSTEP_BIN_DIR;

// --help lists each binary's own flags under topic headers, with a usage
// line; the server-only TLS flags are the server's alone. --helpfull keeps
// absl's full list.
TEST(HelpTest, OwnFlagsGroupedByTopic) {
  RunResult worker = RunProcess({kBin + "/lockstep_worker", "--help"});
  EXPECT_EQ(worker.exit_code, kExitOk) << worker.output;
  EXPECT_THAT(worker.output, HasSubstr("Usage: lockstep_worker "));
  const size_t job = worker.output.find("\nJob:\n");
  const size_t training = worker.output.find("\nTraining:\n");
  const size_t tls = worker.output.find("\nTLS and authentication:\n");
  ASSERT_NE(job, std::string::npos) << worker.output;
  ASSERT_NE(training, std::string::npos) << worker.output;
  ASSERT_NE(tls, std::string::npos) << worker.output;
  EXPECT_LT(job, training);
  EXPECT_LT(training, tls);
  EXPECT_THAT(worker.output, HasSubstr("--epochs ("));
  EXPECT_THAT(worker.output, Not(HasSubstr("--admin_identities")));
  EXPECT_THAT(worker.output, Not(HasSubstr("Flags from")));
  // It ends with the variables the program reads (env_flags.h).
  EXPECT_THAT(worker.output, HasSubstr("LOCKSTEP_TLS_CERT"));
  EXPECT_THAT(worker.output, HasSubstr("LOCKSTEP_DATA_DIR"));
  EXPECT_THAT(worker.output, HasSubstr("LOCKSTEP_SERVERS"));
  RunResult ctl = RunProcess({kBin + "/lockstep_ctl", "--help"});
  EXPECT_EQ(ctl.exit_code, kExitOk) << ctl.output;
  EXPECT_THAT(ctl.output, HasSubstr("\nPolling:\n"));
  EXPECT_THAT(ctl.output, Not(HasSubstr("--admin_identities")));
  RunResult server = RunProcess({kBin + "/lockstep_server", "--help"});
  EXPECT_EQ(server.exit_code, kExitOk) << server.output;
  EXPECT_THAT(server.output, HasSubstr("\nCheckpoints:\n"));
  EXPECT_THAT(server.output, HasSubstr("--admin_identities ("));
  EXPECT_THAT(server.output, HasSubstr("--worker_identities ("));
  RunResult full = RunProcess({kBin + "/lockstep_worker", "--helpfull"});
  EXPECT_EQ(full.exit_code, kExitOk) << full.output;
  EXPECT_THAT(full.output, HasSubstr("--admin_identities ("));
  EXPECT_THAT(full.output, HasSubstr("--flagfile ("));
}

// --list_flags, which lockstep_launch routes by: one "NAME bool|value" line
// per flag.
TEST(HelpTest, ListFlagsPrintsTheFlagTable) {
  RunResult r = RunProcess({kBin + "/lockstep_server", "--list_flags"});
  EXPECT_EQ(r.exit_code, kExitOk) << r.output;
  EXPECT_THAT(r.output, HasSubstr("\ncheckpoint_dir value\n"));
  EXPECT_THAT(r.output, HasSubstr("\nexit_when_done bool\n"));
  EXPECT_THAT(r.output, Not(HasSubstr("\nepochs ")));
}

// --validate_only checks the options as a start would and exits 0 without
// starting (no server is needed, none listens), 2 when they are wrong.
TEST(HelpTest, ValidateOnlyChecksWithoutStarting) {
  const std::vector<std::string> worker = {
      kBin + "/lockstep_worker", "--servers=127.0.0.1:1", "--workers=1",
      "--rank=0", "--validate_only"};
  RunResult ok = RunProcess(worker);
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.output;
  std::vector<std::string> bad = worker;
  bad.push_back("--optimizer=rmsprop");
  RunResult refused = RunProcess(bad);
  EXPECT_EQ(refused.exit_code, kExitPermanent) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("--optimizer must be"));
  // Elastic membership: all-reduce's and synchronous PS's, within
  // --workers.
  const std::vector<std::string> elastic = {kBin + "/lockstep_worker",
                                            "--servers=127.0.0.1:1",
                                            "--workers=3",
                                            "--rank=0",
                                            "--validate_only",
                                            "--min_workers=2"};
  RunResult ps = RunProcess(elastic);
  EXPECT_EQ(ps.exit_code, kExitOk) << ps.output;
  std::vector<std::string> rounds = elastic;
  rounds.push_back("--sync=diloco");
  RunResult diloco = RunProcess(rounds);
  EXPECT_EQ(diloco.exit_code, kExitOk) << diloco.output;
  for (const char* refused_mode : {"--sync=async", "--backup_workers=1"}) {
    std::vector<std::string> flags = elastic;
    flags.push_back(refused_mode);
    RunResult no_steps = RunProcess(flags);
    EXPECT_EQ(no_steps.exit_code, kExitPermanent) << no_steps.output;
    EXPECT_THAT(no_steps.output,
                HasSubstr("--min_workers below --workers needs "
                          "--sync=allreduce, or --sync=ps, localsgd or "
                          "diloco without --backup_workers"));
  }
  std::vector<std::string> allreduce = elastic;
  allreduce.push_back("--sync=allreduce");
  RunResult elastic_ok = RunProcess(allreduce);
  EXPECT_EQ(elastic_ok.exit_code, kExitOk) << elastic_ok.output;
  allreduce.push_back("--min_workers=4");
  RunResult too_many = RunProcess(allreduce);
  EXPECT_EQ(too_many.exit_code, kExitPermanent) << too_many.output;
  EXPECT_THAT(too_many.output, HasSubstr("--min_workers must be in [1, "));
  RunResult server =
      RunProcess({kBin + "/lockstep_server", "--workers=1", "--validate_only"});
  EXPECT_EQ(server.exit_code, kExitOk) << server.output;
  EXPECT_THAT(server.output, Not(HasSubstr("listening")));
}

// train.sh -h prints its usage and the launcher's help, builds nothing and
// exits 0.
TEST(TrainScriptTest, HelpPrintsUsage) {
  for (const char* flag : {"-h", "--help"}) {
    RunResult r =
        RunProcess({std::string(LOCKSTEP_SOURCE_DIR) + "/deploy/local/train.sh",
                    "--epochs=1", flag},
                   {"LOCKSTEP_BUILD_DIR=" + kBin + "/.."}, absl::Seconds(60));
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("usage: deploy/local/train.sh"));
    EXPECT_THAT(r.output, HasSubstr("Usage: lockstep_launch"));
    EXPECT_THAT(r.output, HasSubstr("--metrics_port_base ("));
    EXPECT_THAT(r.output, Not(HasSubstr("Building Lockstep")));
  }
}

// --help lists each binary's own flags and the TLS flags of
// common/security/tls_flags.cc (absl alone would list neither: it looks for a file
// named after the program), and exits 0: the user asked for it.
TEST(HelpTest, EveryBinaryListsItsFlagsAndExitsZero) {
  const std::vector<std::vector<std::string>> cases = {
      {"lockstep_worker", "--servers", "--model", "--cpu_conv", "--sync",
       "--push_window", "--push_thread", "--step_timeout_s", "--lr_schedule",
       "--lr_values", "--tls_ca", "--token_file"},
      {"lockstep_server", "--listen", "--workers", "--checkpoint_dir",
       "--init_from", "--step_timeout_s", "--on_worker_loss", "--sum_order",
       "--tls_cert", "--token_file"},
      {"lockstep_ctl", "--watch", "--interval", "--timeout", "--tls_ca",
       "--token_file"},
      {"lockstep_launch", "--workers", "--ps", "--gpus", "--grace_period"},
      {"lockstep_gpu_bench", "--seconds", "--resnet_batch", "--large_batch"},
  };
  for (const std::vector<std::string>& c : cases) {
    SCOPED_TRACE(c[0]);
    RunResult r =
        RunProcess({kBin + "/" + c[0], "--help"}, {}, absl::Seconds(30));
    EXPECT_EQ(r.exit_code, kExitOk) << r.output;
    for (size_t i = 1; i < c.size(); ++i) {
      EXPECT_THAT(r.output, HasSubstr(c[i] + " ("));
    }
  }
}

// The production server carries no test hooks; they live in
// lockstep_server_testing, whose help lists them beside the server's own.
TEST(HelpTest, TestHooksAreOnlyInTheTestingServer) {
  RunResult real = RunProcess({kBin + "/lockstep_server", "--helpfull"}, {},
                              absl::Seconds(30));
  EXPECT_EQ(real.exit_code, kExitOk) << real.output;
  EXPECT_THAT(real.output, HasSubstr("--listen ("));
  EXPECT_THAT(real.output, Not(HasSubstr("testing_")));
  RunResult testing = RunProcess({kBin + "/lockstep_server_testing", "--help"},
                                 {}, absl::Seconds(30));
  EXPECT_EQ(testing.exit_code, kExitOk) << testing.output;
  EXPECT_THAT(testing.output, HasSubstr("--listen ("));
  EXPECT_THAT(testing.output, HasSubstr("--testing_checkpoint_pause_ms ("));
}

}  // namespace
}  // namespace lockstep
