// Tests for lockstep_launch's output prefixing and its process group,
// driven with real /bin/sh children.
#include "deploy/launch/process_group.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "deploy/launch/line_prefixer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/launch_test_util.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;
using Reason = RunResult::Reason;

// ----------------------------------------------------------- LinePrefixer

std::string Prefix(const std::vector<std::string>& chunks, bool flush) {
  LinePrefixer prefixer("[w0] ");
  std::string out;
  for (const std::string& chunk : chunks) prefixer.Feed(chunk, &out);
  if (flush) prefixer.Flush(&out);
  return out;
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
                    .Start("env",
                           {"sh", "-c", "echo \"$LOCKSTEP_X ${HOME:+home}\""},
                           {"LOCKSTEP_X=set"})
                    .ok());
    const RunResult result = group.Run([&] { return group.num_running() == 0; },
                                       Within(absl::Seconds(5)));
    EXPECT_EQ(result.reason, Reason::kDone);
  }
  EXPECT_EQ(sink.Read(), "[env] set home\n");
}

TEST(ProcessGroupTest, ABareNameIsFoundInTheChildsPath) {
  // A program only the child's PATH holds: lookup follows that PATH, as a
  // shell or env(1) would.
  const std::string dir = ::testing::TempDir() + "/lockstep_path_test";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  const std::string program = dir + "/lockstep-path-probe";
  FILE* f = fopen(program.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("#!/bin/sh\necho found\n", f);
  fclose(f);
  ASSERT_EQ(chmod(program.c_str(), 0755), 0);
  Sink sink;
  {
    ProcessGroup group(To(sink));
    ASSERT_TRUE(group
                    .Start("probe", {"lockstep-path-probe"},
                           {"PATH=" + dir + ":/usr/bin:/bin"})
                    .ok());
    const RunResult result = group.Run([&] { return group.num_running() == 0; },
                                       Within(absl::Seconds(5)));
    EXPECT_EQ(result.reason, Reason::kDone);
  }
  EXPECT_EQ(sink.Read(), "[probe] found\n");
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

}  // namespace
}  // namespace lockstep
