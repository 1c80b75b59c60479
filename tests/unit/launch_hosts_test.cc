// Tests for lockstep_launch across hosts: the host list, the placement and
// the flags it gives each process, the ssh command line, and the remote
// wrapper run by a local /bin/sh as sshd would run it (the whole launch over
// ssh: tests/deploy/ssh_launch_test.sh).
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/launch/host_list.h"
#include "deploy/launch/launcher.h"
#include "deploy/launch/process_group.h"
#include "deploy/launch/remote_spawn.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/launch_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Reason = RunResult::Reason;

std::vector<std::pair<std::string, int>> Pairs(
    const std::vector<HostSlots>& hosts) {
  std::vector<std::pair<std::string, int>> out;
  for (const HostSlots& h : hosts) out.emplace_back(h.host, h.slots);
  return out;
}

TEST(ParseHostListTest, ReadsHostsAndSlots) {
  absl::StatusOr<std::vector<HostSlots>> hosts =
      ParseHostList("h1:2, user@h2 ,10.0.0.3:4,[fd00::1]:3,fd00::2");
  ASSERT_TRUE(hosts.ok()) << hosts.status();
  EXPECT_THAT(Pairs(*hosts),
              ElementsAre(std::pair<std::string, int>("h1", 2),
                          std::pair<std::string, int>("user@h2", 1),
                          std::pair<std::string, int>("10.0.0.3", 4),
                          std::pair<std::string, int>("fd00::1", 3),
                          std::pair<std::string, int>("fd00::2", 1)));
  // Only a written :N counts as given (--nproc_per_node checks it).
  EXPECT_TRUE((*hosts)[0].slots_given);
  EXPECT_FALSE((*hosts)[1].slots_given);
  EXPECT_TRUE((*hosts)[3].slots_given);
  EXPECT_FALSE((*hosts)[4].slots_given);
}

TEST(ParseHostListTest, RejectsBadEntriesByName) {
  for (const char* list : {"", "h1,,h2", "h1:0", "h1:x", ":2", "user@:2"}) {
    absl::StatusOr<std::vector<HostSlots>> hosts = ParseHostList(list);
    EXPECT_EQ(hosts.status().code(), absl::StatusCode::kInvalidArgument)
        << list;
  }
  EXPECT_EQ(ParseHostList("h1,h2:-1").status().message(),
            "host \"h2:-1\": slots \"-1\" are not a positive number");
  EXPECT_EQ(ParseHostList("h1,").status().message(),
            "empty entry in the host list \"h1,\"");
}

TEST(HostAddressTest, DropsTheUserAndBracketsIpv6) {
  EXPECT_EQ(HostAddress("h2"), "h2");
  EXPECT_EQ(HostAddress("user@h2"), "h2");
  EXPECT_EQ(HostAddress("fd00::1"), "[fd00::1]");
  EXPECT_EQ(HostAddress("root@fd00::1"), "[fd00::1]");
}

TEST(PlaceOnHostsTest, FillsSlotsInOrderAndShardsRoundRobin) {
  absl::StatusOr<HostPlan> plan =
      PlaceOnHosts({{"h1", 2}, {"h2", 2}}, {}, /*workers=*/3, /*ps=*/3);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->worker_hosts, ElementsAre("h1", "h1", "h2"));
  EXPECT_THAT(plan->server_hosts, ElementsAre("h1", "h2", "h1"));
  EXPECT_TRUE(plan->active());

  plan = PlaceOnHosts({{"b", 1}, {"c", 1}}, {{"a", 5}}, 2, 2);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->worker_hosts, ElementsAre("b", "c"));
  EXPECT_THAT(plan->server_hosts, ElementsAre("a", "a"));
  EXPECT_EQ(plan->ServerHost(1), "a");
  EXPECT_EQ(plan->WorkerHost(1), "c");
}

TEST(PlaceOnHostsTest, RejectsTooFewSlots) {
  absl::StatusOr<HostPlan> plan =
      PlaceOnHosts({{"h1", 1}, {"h2", 2}}, {}, 4, 1);
  EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(plan.status().message(),
            "4 workers, but the hosts have 3 slot(s): give more hosts, or "
            "slots as HOST:N");
}

TEST(PlaceOnHostsTest, RejectsLoopbackAmongOtherHosts) {
  absl::StatusOr<HostPlan> plan =
      PlaceOnHosts({{"localhost", 1}, {"h2", 1}}, {}, 2, 1);
  EXPECT_EQ(plan.status().message(),
            "\"localhost\" is this machine's loopback, which the other "
            "hosts cannot reach: give its name or address");
  EXPECT_EQ(
      PlaceOnHosts({{"h1", 1}}, {{"root@127.0.0.1", 1}}, 1, 1).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlaceOnHosts({{"h1", 1}}, {{"::1", 1}}, 1, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Loopback alone is one machine reached over ssh: fine.
  plan = PlaceOnHosts({{"localhost", 2}}, {{"127.0.0.1", 1}}, 2, 1);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_THAT(plan->worker_hosts, ElementsAre("localhost", "localhost"));
}

TEST(HostPlanTest, InactivePlanKeepsEverythingOnThisMachine) {
  const HostPlan local;
  EXPECT_FALSE(local.active());
  EXPECT_EQ(local.ServerHost(0), "");
  EXPECT_EQ(local.WorkerHost(3), "");
  EXPECT_THAT(ServerListenFlags(local, 0, "/tmp/p", false),
              ElementsAre("--listen=127.0.0.1:0", "--port_file=/tmp/p"));
  EXPECT_TRUE(RemoteWorkerFlags(local, 0, false).empty());
  EXPECT_EQ(ServerAddress(local, 0, 4242), "127.0.0.1:4242");
  EXPECT_EQ(HostNote(""), "");
  EXPECT_STREQ(NotListeningYet(local), "no port file from ");
}

TEST(HostPlanTest, AcrossHostsListensEverywhereAtFixedPorts) {
  HostPlan plan;
  plan.worker_hosts = {"u@h1", "fd00::2"};
  plan.server_hosts = {"h1", "root@h2"};
  plan.server_port = 7000;
  EXPECT_THAT(ServerListenFlags(plan, 1, "/tmp/p", /*tls=*/false),
              ElementsAre("--listen=0.0.0.0:7001", "--insecure"));
  EXPECT_THAT(ServerListenFlags(plan, 0, "/tmp/p", /*tls=*/true),
              ElementsAre("--listen=0.0.0.0:7000"));
  EXPECT_THAT(RemoteWorkerFlags(plan, 0, false),
              ElementsAre("--allreduce_host=h1", "--insecure"));
  EXPECT_THAT(RemoteWorkerFlags(plan, 1, true),
              ElementsAre("--allreduce_host=[fd00::2]"));
  EXPECT_EQ(ServerAddress(plan, 1, 7001), "h2:7001");
  EXPECT_EQ(HostNote("u@h1"), " (ssh to u@h1)");
  EXPECT_STREQ(NotListeningYet(plan), "no connection accepted by ");
}

TEST(HostPlanTest, ServerAndWorkerCommandLinesFollowThePlan) {
  LaunchOptions options;
  options.bin_dir = "/opt/bin";
  options.workers = 2;
  options.hosts.worker_hosts = {"b", "c"};
  options.hosts.server_hosts = {"a"};
  EXPECT_THAT(ServerArgv(options, 0, "/tmp/ps0.port"),
              ElementsAre("/opt/bin/lockstep_server", "--listen=0.0.0.0:50051",
                          "--insecure", "--workers=2", "--exit_when_done"));
  options.worker_args = {"--max_steps=5"};
  EXPECT_THAT(WorkerArgv(options, 1, "a:50051"),
              ElementsAre("/opt/bin/lockstep_worker", "--servers=a:50051",
                          "--workers=2", "--rank=1", "--progress=none",
                          "--allreduce_host=c", "--insecure", "--max_steps=5"));
}

// torchrun's variables of a COMMAND across hosts: LOCAL_* count the
// workers of the same machine, whatever the user@ or the loopback name.
TEST(HostPlanTest, LocalRanksCountTheWorkersOfTheSameMachine) {
  LaunchOptions options;
  options.workers = 5;
  options.command = {"python3", "train.py"};
  options.hosts.worker_hosts = {"h1", "h1", "u@h2", "h2", "h1"};
  options.hosts.server_hosts = {"h1"};
  const char* const expected[][2] = {{"LOCAL_RANK=0", "LOCAL_WORLD_SIZE=3"},
                                     {"LOCAL_RANK=1", "LOCAL_WORLD_SIZE=3"},
                                     {"LOCAL_RANK=0", "LOCAL_WORLD_SIZE=2"},
                                     {"LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2"},
                                     {"LOCAL_RANK=2", "LOCAL_WORLD_SIZE=3"}};
  for (int rank = 0; rank < 5; ++rank) {
    const std::vector<std::string> env =
        WorkerEnv(options, rank, {"h1:50051"}, "", nullptr);
    ASSERT_GE(env.size(), 7u);
    EXPECT_THAT(std::vector<std::string>(env.begin() + 3, env.begin() + 7),
                ElementsAre(absl::StrCat("RANK=", rank), "WORLD_SIZE=5",
                            expected[rank][0], expected[rank][1]))
        << rank;
  }
  HostPlan loopback;
  loopback.worker_hosts = {"localhost", "127.0.0.1", "me@localhost"};
  EXPECT_EQ(LocalRankOf(loopback, 3, 2).rank, 2);
  EXPECT_EQ(LocalRankOf(loopback, 3, 2).workers, 3);
  // On this machine: the job's rank and size.
  EXPECT_EQ(LocalRankOf(HostPlan(), 4, 3).rank, 3);
  EXPECT_EQ(LocalRankOf(HostPlan(), 4, 3).workers, 4);
}

TEST(ShellQuoteTest, QuotesForPosixShells) {
  EXPECT_EQ(ShellQuote("plain"), "'plain'");
  EXPECT_EQ(ShellQuote(""), "''");
  EXPECT_EQ(ShellQuote("it's $HOME"), "'it'\\''s $HOME'");
}

TEST(RemoteArgvTest, SshThenTheWrappedQuotedCommand) {
  HostPlan plan;
  plan.ssh_args = {"-F", "my config"};
  plan.dir = "/work dir";
  const std::vector<std::string> argv = RemoteArgv(
      plan, "u@h1", {"/bin/x", "it's"}, {"A=b c"}, absl::Milliseconds(2450));
  ASSERT_EQ(argv.size(), 9u);
  EXPECT_THAT(std::vector<std::string>(argv.begin(), argv.begin() + 8),
              ElementsAre("ssh", "-o", "BatchMode=yes", "-T", "-F", "my config",
                          "u@h1", "--"));
  EXPECT_TRUE(absl::StartsWith(argv[8], "exec sh -c 'd=$1 g=$2; shift 2\n"))
      << argv[8];
  EXPECT_TRUE(
      absl::EndsWith(argv[8],
                     "' lockstep-remote '/work dir' 25 env 'A=b c' '/bin/x' "
                     "'it'\\''s'"))
      << argv[8];
}

// The remote command as sshd runs it: the login shell's `sh -c`.
std::vector<std::string> AsSshdRunsIt(const std::vector<std::string>& argv,
                                      absl::Duration grace) {
  HostPlan plan;
  plan.dir = "/";
  return Sh(RemoteArgv(plan, "h", argv, {}, grace).back());
}

// `options`, with the condition checked every 10 ms, not only after output.
RunOptions Rechecked(RunOptions options) {
  options.recheck_interval = absl::Milliseconds(10);
  return options;
}

// The text of /proc/PID/`file`; empty when there is no such process.
std::string ProcFile(pid_t pid, const char* file) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/", file));
  return std::string((std::istreambuf_iterator<char>(in)),
                     std::istreambuf_iterator<char>());
}

std::string Comm(pid_t pid) { return ProcFile(pid, "comm"); }

// Whether `pid` has exited (gone, or a zombie not yet reaped by init).
bool Exited(pid_t pid) {
  const std::string text = ProcFile(pid, "stat");
  const size_t paren = text.rfind(')');
  return text.empty() || paren == std::string::npos ||
         text.substr(paren + 2, 1) == "Z";
}

TEST(RemoteWrapperTest, PassesTheExitCodeAndOutputOn) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group
                  .Start("r", AsSshdRunsIt(Sh("pwd; exit 3"), absl::Seconds(5)),
                         {}, /*stop_by_closing_stdin=*/true)
                  .ok());
  const RunResult result =
      group.Run([] { return false; }, Within(absl::Seconds(20)));
  ASSERT_EQ(result.reason, Reason::kChildFailed);
  EXPECT_EQ(result.failure.Describe(), "exited with code 3");
  EXPECT_EQ(sink.Read(), "[r] /\n");
}

TEST(RemoteWrapperTest, ClosingStdinStopsTheProgramAndItsChildren) {
  Sink sink;
  ProcessGroup group(To(sink));
  // The program starts a child of its own, says so, and leaves on SIGTERM.
  ASSERT_TRUE(group
                  .Start("r",
                         AsSshdRunsIt(Sh("trap 'echo stopping; exit 143' TERM; "
                                         "sleep 300 & echo child $!; wait"),
                                      absl::Seconds(20)),
                         {}, /*stop_by_closing_stdin=*/true)
                  .ok());
  // Until the child runs sleep: a signal between its fork and its exec
  // goes to the shell's trap, which the exec then forgets.
  pid_t child = 0;
  RunResult result = group.Run(
      [&] {
        std::string text = sink.Read();
        return absl::StartsWith(text, "[r] child ") &&
               absl::SimpleAtoi(absl::StripAsciiWhitespace(text.substr(10)),
                                &child) &&
               Comm(child) == "sleep\n";
      },
      Rechecked(Within(absl::Seconds(20))));
  ASSERT_EQ(result.reason, Reason::kDone);
  ASSERT_GT(child, 0);
  EXPECT_FALSE(Exited(child));
  group.Terminate(absl::Seconds(20));
  ASSERT_EQ(group.exits().size(), 1u);
  EXPECT_EQ(group.exits()[0].Describe(), "exited with code 143");
  EXPECT_THAT(sink.Read(), HasSubstr("[r] stopping\n"));
  // The sleep, in the program's process group, got SIGTERM too.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!Exited(child) && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_TRUE(Exited(child));
}

TEST(RemoteWrapperTest, KillsAProgramThatIgnoresSigtermAfterTheGrace) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group
                  .Start("r",
                         AsSshdRunsIt(Sh("trap '' TERM; echo up; "
                                         "while :; do sleep 0.1; done"),
                                      absl::Milliseconds(300)),
                         {}, /*stop_by_closing_stdin=*/true)
                  .ok());
  ASSERT_EQ(group
                .Run([&] { return absl::StrContains(sink.Read(), "[r] up\n"); },
                     Within(absl::Seconds(20)))
                .reason,
            Reason::kDone);
  // The launcher's own grace is longer: the wrapper's SIGKILL ends it.
  group.Terminate(absl::Seconds(20));
  ASSERT_EQ(group.exits().size(), 1u);
  EXPECT_EQ(group.exits()[0].Describe(), "exited with code 137");
  EXPECT_THAT(sink.Read(), ::testing::Not(HasSubstr("still running")));
}

// A listening socket on a free loopback port; -1 on failure.
int ListenOnLoopback(int* port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), length) != 0 ||
      listen(fd, 4) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return -1;
  }
  *port = ntohs(addr.sin_port);
  return fd;
}

TEST(ServerPortTest, AcrossHostsWaitsForAnAcceptedConnection) {
  int port = 0;
  const int fd = ListenOnLoopback(&port);
  ASSERT_GE(fd, 0);
  HostPlan plan;
  plan.worker_hosts = {"w"};
  plan.server_hosts = {"x", "127.0.0.1"};
  plan.server_port = port - 1;  // Shard 1 is at `port`.
  EXPECT_TRUE(AcceptsConnections("127.0.0.1", port, absl::Seconds(5)));
  absl::StatusOr<int> listening = ServerPort(plan, 1, "unused");
  ASSERT_TRUE(listening.ok()) << listening.status();
  EXPECT_EQ(*listening, port);
  close(fd);
  EXPECT_FALSE(AcceptsConnections("127.0.0.1", port, absl::Seconds(5)));
  EXPECT_EQ(ServerPort(plan, 1, "unused").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace lockstep
