// Tests for lockstep_launch's core: output prefixing, the process group driven
// with real /bin/sh children, argument splitting, and whole launches with
// stand-in server and worker scripts.
#include "deploy/launch/launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/launch/launcher_args.h"
#include "deploy/launch/line_prefixer.h"
#include "deploy/launch/process_group.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using Reason = RunResult::Reason;

// An in-memory file standing in for the launcher's stdout. Unlike a pipe it
// never fills up, so nobody has to read it while the group runs.
class Sink {
 public:
  Sink() : fd_(memfd_create("launcher_test_sink", MFD_CLOEXEC)) {}
  ~Sink() { close(fd_); }
  int fd() const { return fd_; }
  std::string Read() const {
    struct stat st;
    fstat(fd_, &st);
    std::string text(static_cast<size_t>(st.st_size), '\0');
    const ssize_t n = pread(fd_, text.data(), text.size(), 0);
    text.resize(n > 0 ? static_cast<size_t>(n) : 0);
    return text;
  }

 private:
  const int fd_;
};

std::vector<std::string> Sh(const std::string& script) {
  return {"/bin/sh", "-c", script};
}

ProcessGroupOptions To(const Sink& sink) {
  ProcessGroupOptions options;
  options.output_fd = sink.fd();
  return options;
}

RunOptions Within(absl::Duration timeout) {
  RunOptions options;
  options.deadline = absl::Now() + timeout;
  return options;
}

// ----------------------------------------------------------- LinePrefixer

std::string Prefix(const std::vector<std::string>& chunks, bool flush) {
  LinePrefixer prefixer("[w0] ");
  std::string out;
  for (const std::string& chunk : chunks) prefixer.Feed(chunk, &out);
  if (flush) prefixer.Flush(&out);
  return out;
}

// nvidia-smi lists every GPU; CUDA shows a worker only those that
// CUDA_VISIBLE_DEVICES names, numbered from 0, so --gpu=rank % GPUs must
// count those.
TEST(VisibleGpusTest, FollowsCudaVisibleDevices) {
  EXPECT_EQ(VisibleGpus(8, nullptr), 8);
  EXPECT_EQ(VisibleGpus(8, "2,3"), 2);
  EXPECT_EQ(VisibleGpus(8, " 5 , 1 , 7 "), 3);
  EXPECT_EQ(VisibleGpus(4, "GPU-6d8e1b2c,GPU-0f4a2e91"), 2);  // UUIDs.
  // The list ends at its first invalid entry:
  EXPECT_EQ(VisibleGpus(8, "0,1,,2"), 2);    // empty,
  EXPECT_EQ(VisibleGpus(8, "0,-1,2"), 1);    // negative,
  EXPECT_EQ(VisibleGpus(8, "3,1gpu,2"), 1);  // not a number,
  EXPECT_EQ(VisibleGpus(2, "0,1,2,3"), 2);   // not installed,
  EXPECT_EQ(VisibleGpus(4, "1,7,0"), 1);
  EXPECT_EQ(VisibleGpus(8, "2,2,3"), 1);       // repeated,
  EXPECT_EQ(VisibleGpus(8, "GPU-6d8e,1"), 1);  // of another kind.
  EXPECT_EQ(VisibleGpus(8, ""), 0);
  EXPECT_EQ(VisibleGpus(8, "-1"), 0);
  EXPECT_EQ(VisibleGpus(0, "0"), 0);
  // One MIG device per process.
  EXPECT_EQ(VisibleGpus(1, "MIG-4f5a,MIG-8c2d"), 1);
}

TEST(LinePrefixerTest, PrefixesEveryLineAcrossChunks) {
  EXPECT_EQ(Prefix({"a\nb", "c\n\nd"}, false), "[w0] a\n[w0] bc\n[w0] \n");
}

TEST(LinePrefixerTest, CarriageReturnRedrawsInPlace) {
  EXPECT_EQ(Prefix({"\r10%\r", "50%\r100%\n"}, false),
            "\r[w0] 10%\r[w0] 50%\r[w0] 100%\n");
}

TEST(LinePrefixerTest, BarEndedByItsOwnNewline) {
  // "<bar>\r" style, then a lone "\n" to keep the last state.
  EXPECT_EQ(Prefix({"1/2\r2/2\r", "\n", "next\n"}, false),
            "[w0] 1/2\r[w0] 2/2\n[w0] next\n");
}

TEST(LinePrefixerTest, CrLfEndsOneLine) {
  EXPECT_EQ(Prefix({"dos\r\nline\r\n"}, false), "[w0] dos\n[w0] line\n");
}

TEST(LinePrefixerTest, FlushEmitsPartialLineAndClosesOpenBar) {
  EXPECT_EQ(Prefix({"x\npartial"}, false), "[w0] x\n");
  EXPECT_EQ(Prefix({"x\npartial"}, true), "[w0] x\n[w0] partial\n");
  EXPECT_EQ(Prefix({"bar\r"}, true), "[w0] bar\n");
  EXPECT_EQ(Prefix({}, true), "");
}

TEST(LinePrefixerTest, OverlongSegmentIsSplit) {
  const std::string chunk(LinePrefixer::kMaxSegment, 'x');
  EXPECT_EQ(Prefix({chunk, "y\n"}, false),
            absl::StrCat("[w0] ", chunk, "\n[w0] y\n"));
}

// ----------------------------------------------------------- ProcessGroup

TEST(ProcessGroupTest, PrefixesEachChildsLines) {
  Sink sink;
  {
    ProcessGroup group(To(sink));
    ASSERT_TRUE(group.Start("one", Sh("echo a; echo b >&2")).ok());
    ASSERT_TRUE(group.Start("two", Sh("printf 'c\\n'")).ok());
    const RunResult result = group.Run([&] { return group.num_running() == 0; },
                                       Within(absl::Seconds(5)));
    EXPECT_EQ(result.reason, Reason::kDone);
  }
  std::vector<std::string> lines =
      absl::StrSplit(sink.Read(), '\n', absl::SkipEmpty());
  EXPECT_THAT(lines, UnorderedElementsAre("[one] a", "[one] b", "[two] c"));
}

TEST(ProcessGroupTest, PrefixesCarriageReturnSegments) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group
                  .Start("bar", Sh("printf '\\r1/3\\r2/3'; sleep 0.05; "
                                   "printf '\\r3/3\\n'"))
                  .ok());
  group.Run([&] { return group.num_running() == 0; }, Within(absl::Seconds(5)));
  EXPECT_EQ(sink.Read(), "\r[bar] 1/3\r[bar] 2/3\r[bar] 3/3\n");
}

TEST(ProcessGroupTest, FlushesPartialFinalLine) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group.Start("p", Sh("echo whole; printf 'no newline'")).ok());
  group.Run([&] { return group.num_running() == 0; }, Within(absl::Seconds(5)));
  EXPECT_EQ(sink.Read(), "[p] whole\n[p] no newline\n");
}

TEST(ProcessGroupTest, LogEndsAnOpenProgressLine) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group.Start("bar", Sh("printf 'step\\r'; exec sleep 30")).ok());
  const RunResult ready =
      group.Run([&] { return absl::StrContains(sink.Read(), "step"); },
                Within(absl::Seconds(5)));
  ASSERT_EQ(ready.reason, Reason::kDone);
  group.Log("hello");
  group.Terminate(absl::Seconds(5));
  EXPECT_EQ(sink.Read(), "[bar] step\n[launch] hello\n");
}

TEST(ProcessGroupTest, ReportsFailureAndTerminatesTheOthersPromptly) {
  Sink sink;
  const absl::Time start = absl::Now();
  ProcessGroup group(To(sink));
  absl::StatusOr<pid_t> sleeper = group.Start("sleeper", Sh("exec sleep 30"));
  ASSERT_TRUE(sleeper.ok());
  absl::StatusOr<pid_t> failer =
      group.Start("failer", Sh("echo giving up; exit 3"));
  ASSERT_TRUE(failer.ok());

  const RunResult result =
      group.Run([] { return false; }, Within(absl::Seconds(20)));
  ASSERT_EQ(result.reason, Reason::kChildFailed);
  EXPECT_EQ(result.failure.name, "failer");
  EXPECT_EQ(result.failure.pid, *failer);
  EXPECT_EQ(result.failure.Describe(), "exited with code 3");
  EXPECT_TRUE(group.IsRunning(*sleeper));

  group.Terminate(absl::Seconds(20));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(group.num_running(), 0);
  ASSERT_EQ(group.exits().size(), 2u);
  EXPECT_EQ(group.exits()[1].name, "sleeper");
  EXPECT_TRUE(WIFSIGNALED(group.exits()[1].wait_status));
  EXPECT_EQ(WTERMSIG(group.exits()[1].wait_status), SIGTERM);
  EXPECT_THAT(sink.Read(), HasSubstr("[failer] giving up\n"));
}

TEST(ProcessGroupTest, KillsChildIgnoringSigtermAfterGrace) {
  Sink sink;
  ProcessGroup group(To(sink));
  // Ignored signals stay ignored across exec, so sleep ignores TERM too.
  ASSERT_TRUE(
      group.Start("stubborn", Sh("trap '' TERM; echo ready; exec sleep 30"))
          .ok());
  const RunResult ready =
      group.Run([&] { return absl::StrContains(sink.Read(), "ready"); },
                Within(absl::Seconds(5)));
  ASSERT_EQ(ready.reason, Reason::kDone);

  const absl::Duration grace = absl::Milliseconds(300);
  const absl::Time start = absl::Now();
  group.Terminate(grace);
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, grace);
  EXPECT_LT(took, absl::Seconds(5));
  ASSERT_EQ(group.exits().size(), 1u);
  EXPECT_TRUE(WIFSIGNALED(group.exits()[0].wait_status));
  EXPECT_EQ(WTERMSIG(group.exits()[0].wait_status), SIGKILL);
  EXPECT_THAT(sink.Read(), HasSubstr("sending SIGKILL"));
}

TEST(ProcessGroupTest, AllSucceeding) {
  Sink sink;
  ProcessGroup group(To(sink));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(group.Start(absl::StrCat("ok", i), Sh("exit 0")).ok());
  }
  const RunResult result = group.Run([&] { return group.num_running() == 0; },
                                     Within(absl::Seconds(5)));
  EXPECT_EQ(result.reason, Reason::kDone);
  ASSERT_EQ(group.exits().size(), 3u);
  for (const ChildExit& exit : group.exits()) EXPECT_TRUE(exit.ok());
}

TEST(ProcessGroupTest, StartReportsExecFailure) {
  Sink sink;
  ProcessGroup group(To(sink));
  absl::StatusOr<pid_t> pid = group.Start("ghost", {"/nonexistent/binary"});
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(pid.status().message(), HasSubstr("/nonexistent/binary"));
  EXPECT_EQ(group.num_running(), 0);
}

TEST(ProcessGroupTest, FindsABareNameInPathAndSetsTheEnvironment) {
  Sink sink;
  {
    ProcessGroup group(To(sink));
    // "sh" from PATH; LOCKSTEP_X set on top of the inherited environment,
    // whose HOME stays.
    ASSERT_TRUE(group
                    .Start("env", {"sh", "-c", "echo \"$LOCKSTEP_X ${HOME:+home}\""},
                           {"LOCKSTEP_X=set"})
                    .ok());
    const RunResult result = group.Run([&] { return group.num_running() == 0; },
                                       Within(absl::Seconds(5)));
    EXPECT_EQ(result.reason, Reason::kDone);
  }
  EXPECT_EQ(sink.Read(), "[env] set home\n");
}

TEST(ProcessGroupTest, ABareNameNotInPathFailsAtStart) {
  Sink sink;
  ProcessGroup group(To(sink));
  absl::StatusOr<pid_t> pid = group.Start("ghost", {"no-such-program-here"});
  ASSERT_FALSE(pid.ok());
  EXPECT_THAT(pid.status().message(), HasSubstr("not found in PATH"));
}

TEST(ProcessGroupTest, InterruptFdStopsRun) {
  Sink sink;
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ProcessGroupOptions options = To(sink);
  options.interrupt_fd = fds[0];
  {
    ProcessGroup group(options);
    ASSERT_TRUE(group.Start("sleeper", Sh("exec sleep 30")).ok());
    const unsigned char sig = SIGINT;
    ASSERT_EQ(write(fds[1], &sig, 1), 1);
    const RunResult result =
        group.Run([] { return false; }, Within(absl::Seconds(5)));
    EXPECT_EQ(result.reason, Reason::kInterrupted);
    EXPECT_EQ(result.signal, SIGINT);
  }  // The destructor kills and reaps the sleeper.
  close(fds[0]);
  close(fds[1]);
}

TEST(ProcessGroupTest, RunStopsAtDeadline) {
  Sink sink;
  ProcessGroup group(To(sink));
  ASSERT_TRUE(group.Start("sleeper", Sh("exec sleep 30")).ok());
  const RunResult result =
      group.Run([] { return false; }, Within(absl::Milliseconds(100)));
  EXPECT_EQ(result.reason, Reason::kDeadline);
}

// ------------------------------------------------------- SplitLauncherArgs

FlagKind TestFlags(absl::string_view name) {
  static const auto* kFlags = new std::map<std::string, FlagKind, std::less<>>{
      {"workers", FlagKind::kValued},
      {"ps", FlagKind::kValued},
      {"help", FlagKind::kBool},
      {"verbose", FlagKind::kBool}};
  auto it = kFlags->find(name);
  return it == kFlags->end() ? FlagKind::kUnknown : it->second;
}

TEST(SplitLauncherArgsTest, SeparatesFlagsKeepingOrder) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--lr=0.1", "--workers=4", "data.bin", "--verbose",
       "--noverbose", "-ps=2", "--epochs", "3", "--nops", "-", "--help"},
      TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--workers=4", "--verbose",
                                           "--noverbose", "-ps=2", "--help"));
  EXPECT_THAT(split->passthrough, ElementsAre("--lr=0.1", "data.bin",
                                              "--epochs", "3", "--nops", "-"));
}

TEST(SplitLauncherArgsTest, EverythingAfterDoubleDashPassesThrough) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--ps=1", "--", "--workers=9", "--", "x"}, TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--ps=1"));
  EXPECT_THAT(split->passthrough, ElementsAre("--workers=9", "--", "x"));
}

TEST(SplitLauncherArgsTest, AProgramAfterTheDoubleDashIsACommand) {
  absl::StatusOr<SplitArgs> split = SplitLauncherArgs(
      {"launch", "--ps=1", "--lr=0.1", "--", "python3", "train.py",
       "--workers=9", "--"},
      TestFlags);
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_THAT(split->launcher, ElementsAre("launch", "--ps=1"));
  EXPECT_THAT(split->passthrough, ElementsAre("--lr=0.1"));
  EXPECT_THAT(split->command,
              ElementsAre("python3", "train.py", "--workers=9", "--"));
}

TEST(SplitLauncherArgsTest, RejectsSeparateValueForLauncherFlag) {
  absl::StatusOr<SplitArgs> split =
      SplitLauncherArgs({"launch", "--workers", "4"}, TestFlags);
  ASSERT_FALSE(split.ok());
  EXPECT_EQ(split.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(split.status().message(), HasSubstr("--workers=VALUE"));
}

// ------------------------------------------------------------ Launcher

TEST(LauncherTest, CommandLines) {
  LaunchOptions options;
  options.workers = 3;
  options.ps = 1;
  options.bin_dir = "/b";
  options.summary_json = "/tmp/s.json";
  options.worker_args = {"--lr=0.5", "--rank=7"};
  EXPECT_THAT(ServerArgv(options, 0, "/t/ps0.port"),
              ElementsAre("/b/lockstep_server", "--listen=127.0.0.1:0",
                          "--port_file=/t/ps0.port", "--workers=3",
                          "--exit_when_done"));
  EXPECT_THAT(
      WorkerArgv(options, 0, "h:1,h:2"),
      ElementsAre("/b/lockstep_worker", "--servers=h:1,h:2", "--workers=3",
                  "--rank=0", "--progress=lines", "--summary_json=/tmp/s.json",
                  "--lr=0.5", "--rank=7"));
  options.progress_bar = true;
  EXPECT_THAT(WorkerArgv(options, 0, "h:1"),
              testing::Contains("--progress=bar"));
  EXPECT_THAT(
      WorkerArgv(options, 2, "h:1"),
      ElementsAre("/b/lockstep_worker", "--servers=h:1", "--workers=3",
                  "--rank=2", "--progress=none", "--lr=0.5", "--rank=7"));
  options.ps = 2;
  EXPECT_THAT(ServerArgv(options, 1, "/t/ps1.port"),
              ElementsAre("/b/lockstep_server", "--listen=127.0.0.1:0",
                          "--port_file=/t/ps1.port", "--workers=3",
                          "--exit_when_done", "--shard=1", "--num_shards=2"));
  options.sum_order = "rank";
  EXPECT_THAT(ServerArgv(options, 0, "/t/ps0.port"),
              testing::Contains("--sum_order=rank"));
  EXPECT_TRUE(ValidateLaunchOptions(options).ok());
  options.sum_order = "random";
  EXPECT_THAT(ValidateLaunchOptions(options).message(),
              HasSubstr("--sum_order must be arrival or rank"));
}

TEST(LauncherTest, ACommandGetsTheJobInItsEnvironment) {
  LaunchOptions options;
  options.workers = 2;
  options.bin_dir = "/b";
  options.command = {"python3", "train.py"};
  options.summary_json = "/s.json";
  options.tls_dir = "/tls";
  options.token_file = "/token";
  options.gpus = 2;
  EXPECT_THAT(WorkerArgv(options, 1, "h:1"), ElementsAre("python3", "train.py"));
  EXPECT_THAT(
      WorkerEnv(options, 0, {"h:1", "h:2"}, "/py", "/old"),
      ElementsAre(
          "LOCKSTEP_RANK=0", "LOCKSTEP_WORKERS=2", "LOCKSTEP_SERVERS=h:1,h:2",
          "TF_CONFIG={\"cluster\": {\"ps\": [\"h:1\", \"h:2\"], "
          "\"worker\": [\"worker0:0\", \"worker1:0\"]}, \"task\": "
          "{\"type\": \"worker\", \"index\": 0}}",
          "LOCKSTEP_PROGRESS=lines", "PYTHONUNBUFFERED=1", "LOCKSTEP_GPU=0",
          "LOCKSTEP_SUMMARY_JSON=/s.json", "LOCKSTEP_TLS_CA=/tls/ca.pem",
          "LOCKSTEP_TLS_CERT=/tls/worker.pem",
          "LOCKSTEP_TLS_KEY=/tls/worker.key", "LOCKSTEP_TOKEN_FILE=/token",
          "PYTHONPATH=/py:/old"));
  // Rank 1: quiet, no summary, the second GPU; no package: PYTHONPATH kept.
  options.tls_dir.clear();
  options.token_file.clear();
  EXPECT_THAT(
      WorkerEnv(options, 1, {"h:1"}, "", nullptr),
      ElementsAre("LOCKSTEP_RANK=1", "LOCKSTEP_WORKERS=2",
                  "LOCKSTEP_SERVERS=h:1",
                  "TF_CONFIG={\"cluster\": {\"ps\": [\"h:1\"], "
                  "\"worker\": [\"worker0:0\", \"worker1:0\"]}, "
                  "\"task\": {\"type\": \"worker\", \"index\": 1}}",
                  "LOCKSTEP_PROGRESS=none", "PYTHONUNBUFFERED=1",
                  "LOCKSTEP_GPU=1"));
}

TEST(LauncherTest, PlacesWorkersOnGpusRoundRobin) {
  LaunchOptions options;
  options.workers = 5;
  options.bin_dir = "/b";
  options.gpus = 2;
  for (int rank = 0; rank < 5; ++rank) {
    EXPECT_THAT(WorkerArgv(options, rank, "h:1"),
                testing::Contains(absl::StrCat("--gpu=", rank % 2)));
  }
  options.gpus = 0;
  for (const std::string& arg : WorkerArgv(options, 3, "h:1")) {
    EXPECT_FALSE(absl::StartsWith(arg, "--gpu=")) << arg;
  }
}

// A bin dir with stand-in lockstep_server / lockstep_worker shell scripts.
class FakeBinDir {
 public:
  FakeBinDir(const std::string& server, const std::string& worker) {
    char pattern[] = "/tmp/launcher_test.XXXXXX";
    path_ = mkdtemp(pattern);
    Write("lockstep_server", server);
    Write("lockstep_worker", worker);
  }
  ~FakeBinDir() {
    for (const char* name : {"lockstep_server", "lockstep_worker", "port"}) {
      unlink(absl::StrCat(path_, "/", name).c_str());
    }
    rmdir(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  void Write(const std::string& name, const std::string& body) {
    const std::string file = absl::StrCat(path_, "/", name);
    FILE* f = fopen(file.c_str(), "w");
    fprintf(f, "#!/bin/sh\n%s\n", body.c_str());
    fclose(f);
    chmod(file.c_str(), 0755);
  }
  std::string path_;
};

// Writes port 4242 the way the real server does (rename), then stays up.
constexpr char kServer[] =
    R"(for a; do case $a in --port_file=*) f=${a#*=};; esac; done
echo 4242 > "$f.tmp" && mv "$f.tmp" "$f"
exec sleep 30)";

LaunchOptions FastOptions(const FakeBinDir& bin) {
  LaunchOptions options;
  options.bin_dir = bin.path();
  options.startup_timeout = absl::Seconds(5);
  options.grace_period = absl::Milliseconds(200);
  return options;
}

TEST(LauncherTest, SuccessfulJob) {
  FakeBinDir bin(kServer, R"(echo "$@")");
  LaunchOptions options = FastOptions(bin);
  options.worker_args = {"--lr=0.5"};
  Sink sink;
  EXPECT_EQ(Launch(options, To(sink)), 0);
  const std::string out = sink.Read();
  EXPECT_THAT(out, HasSubstr("[launch] ps0: pid "));
  EXPECT_THAT(out, HasSubstr(", listening on 127.0.0.1:4242\n"));
  EXPECT_THAT(out, HasSubstr("[worker0] --servers=127.0.0.1:4242 --workers=2 "
                             "--rank=0 --progress=lines --lr=0.5\n"));
  EXPECT_THAT(out, HasSubstr("[worker1] --servers=127.0.0.1:4242 --workers=2 "
                             "--rank=1 --progress=none --lr=0.5\n"));
  EXPECT_THAT(out, HasSubstr("[launch] all 2 workers finished\n"));
}

TEST(LauncherTest, FailingWorkerSetsExitCode) {
  FakeBinDir bin(kServer, R"(case "$*" in *--rank=1*) exit 7;; esac
exec sleep 30)");
  Sink sink;
  const absl::Time start = absl::Now();
  EXPECT_EQ(Launch(FastOptions(bin), To(sink)), 7);
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_THAT(sink.Read(), HasSubstr("worker1 (pid "));
  EXPECT_THAT(sink.Read(), HasSubstr(") exited with code 7; stopping"));
}

TEST(LauncherTest, ServerExitingBeforeListeningFails) {
  FakeBinDir bin("exit 0", "exit 0");
  Sink sink;
  EXPECT_EQ(Launch(FastOptions(bin), To(sink)), 1);
  EXPECT_THAT(sink.Read(),
              HasSubstr("exited with code 0 before it wrote its port file"));
}

TEST(LauncherTest, StartupTimeout) {
  FakeBinDir bin("exec sleep 30", "exit 0");
  LaunchOptions options = FastOptions(bin);
  options.startup_timeout = absl::Milliseconds(200);
  Sink sink;
  EXPECT_EQ(Launch(options, To(sink)), 1);
  EXPECT_THAT(sink.Read(), HasSubstr("no port file from ps0"));
}

TEST(LauncherTest, ReadPortFile) {
  EXPECT_TRUE(absl::IsNotFound(ReadPortFile("/nonexistent/port").status()));
  FakeBinDir bin("", "");
  const std::string file = absl::StrCat(bin.path(), "/port");
  FILE* f = fopen(file.c_str(), "w");
  fputs("4242\n", f);
  fclose(f);
  EXPECT_EQ(ReadPortFile(file).value_or(0), 4242);
  f = fopen(file.c_str(), "w");
  fputs("not a port", f);
  fclose(f);
  EXPECT_EQ(ReadPortFile(file).status().code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace lockstep
