// The progress output's exact text, on a fake clock, for a terminal and
// for logs: the Keras-style bar, its ETA and time per step, the epoch's
// final line, clearing the rest of the line on a redraw, and a line
// printed while a bar is drawn.
#include "worker/train/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "common/base/env.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

// Everything written to a FILE, read back.
class Capture {
 public:
  Capture() : file_(std::tmpfile()) {}
  ~Capture() { std::fclose(file_); }
  FILE* file() { return file_; }
  std::string Text() {
    std::fflush(file_);
    std::string text;
    std::rewind(file_);
    for (int c = std::fgetc(file_); c != EOF; c = std::fgetc(file_)) {
      text += static_cast<char>(c);
    }
    std::fseek(file_, 0, SEEK_END);
    return text;
  }

 private:
  FILE* const file_;
};

TEST(ProgressFormatTest, EtaAsKerasWritesIt) {
  EXPECT_EQ(FormatEta(0), "0s");
  EXPECT_EQ(FormatEta(12.9), "12s");
  EXPECT_EQ(FormatEta(60), "60s");
  EXPECT_EQ(FormatEta(65), "1:05");
  EXPECT_EQ(FormatEta(3723), "1:02:03");
}

TEST(ProgressFormatTest, TimePerStepInItsUnit) {
  EXPECT_EQ(FormatTimePerStep(0), "0s/step");
  EXPECT_EQ(FormatTimePerStep(2.4), "2s/step");
  EXPECT_EQ(FormatTimePerStep(0.003), "3ms/step");
  EXPECT_EQ(FormatTimePerStep(0.00085), "850us/step");
}

TEST(EpochProgressTest, StepAndFinalTexts) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kNone, out.file(), false, &env, 1, 5,
                         938);
  EXPECT_EQ(progress.StepText(123, 0.369, 0.45, 0.87),
            "123/938 [==>...........................] - ETA: 2s - 3ms/step - "
            "loss: 0.4500 - accuracy: 0.8700");
  EXPECT_EQ(progress.StepText(5, 1, 2.5, 0.125),
            "  5/938 [..............................] - ETA: 3:06 - "
            "200ms/step - loss: 2.5000 - accuracy: 0.1250");
  EpochResult result;
  result.loss = 0.3;
  result.accuracy = 0.9;
  result.examples_per_sec = 20000;
  EXPECT_EQ(progress.FinalText(2.814, result),
            "938/938 [==============================] - 3s 3ms/step - "
            "loss: 0.3000 - accuracy: 0.9000 - 20000 examples/s");
  result.has_validation = true;
  result.val_loss = 0.35;
  result.val_accuracy = 0.875;
  EXPECT_EQ(progress.FinalText(2.814, result),
            "938/938 [==============================] - 3s 3ms/step - "
            "loss: 0.3000 - accuracy: 0.9000 - val_loss: 0.3500 - "
            "val_accuracy: 0.8750 - 20000 examples/s");
  EXPECT_EQ(out.Text(), "") << "kNone prints nothing";
}

TEST(EpochProgressTest, TerminalBarClearsTheRestOfTheLine) {
  FakeEnv env;
  Capture out;
  {
    EpochProgress progress(ProgressMode::kBar, out.file(), true, &env, 2, 3, 4);
    env.Advance(absl::Milliseconds(200));
    progress.Update(1, 1.5, 0.25);
    env.Advance(absl::Milliseconds(50));  // Within 100 ms: not drawn.
    progress.Update(2, 1.25, 0.5);
    env.Advance(absl::Milliseconds(150));
    progress.Update(3, 1.0, 0.5);
    env.Advance(absl::Milliseconds(400));
    EpochResult result{0.75, 0.625, 3200};
    progress.Finish(result);
  }
  EXPECT_EQ(out.Text(),
            "Epoch 2/3\n"
            "1/4 [======>.......................] - ETA: 0s - 200ms/step - "
            "loss: 1.5000 - accuracy: 0.2500\x1b[K\r"
            "3/4 [=====================>........] - ETA: 0s - 133ms/step - "
            "loss: 1.0000 - accuracy: 0.5000\x1b[K\r"
            "4/4 [==============================] - 1s 200ms/step - "
            "loss: 0.7500 - accuracy: 0.6250 - 3200 examples/s\x1b[K\r\n");
}

TEST(EpochProgressTest, BarElsewherePadsOverTheLongerText) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kBar, out.file(), false, &env, 1, 1, 10);
  env.Advance(absl::Seconds(20));
  progress.Update(1, 10, 0.5);  // ETA 3:00, longer than "0s" below.
  env.Advance(absl::Seconds(160));
  progress.Update(9, 1, 0.5);
  const std::string first =
      " 1/10 [==>...........................] - ETA: 3:00 - 20s/step - "
      "loss: 10.0000 - accuracy: 0.5000";
  const std::string second =
      " 9/10 [==========================>...] - ETA: 20s - 20s/step - "
      "loss: 1.0000 - accuracy: 0.5000";
  ASSERT_LT(second.size(), first.size());
  EXPECT_EQ(out.Text(), "Epoch 1/1\n" + first + "\r" + second +
                            std::string(first.size() - second.size(), ' ') +
                            "\r");
}

TEST(EpochProgressTest, LinesModePrintsQuartersAndTheEnd) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kLines, out.file(), false, &env, 1, 1,
                         8);
  for (int done = 1; done <= 8; ++done) {
    env.Advance(absl::Milliseconds(10));
    progress.Update(done, 0.5, 0.5);
  }
  progress.Finish(EpochResult{0.5, 0.5, 100});
  EXPECT_EQ(out.Text(),
            "Epoch 1/1\n"
            "2/8 [======>.......................] - ETA: 0s - 10ms/step - "
            "loss: 0.5000 - accuracy: 0.5000\n"
            "4/8 [==============>...............] - ETA: 0s - 10ms/step - "
            "loss: 0.5000 - accuracy: 0.5000\n"
            "6/8 [=====================>........] - ETA: 0s - 10ms/step - "
            "loss: 0.5000 - accuracy: 0.5000\n"
            "8/8 [==============================] - 0s 10ms/step - "
            "loss: 0.5000 - accuracy: 0.5000 - 100 examples/s\n");
}

TEST(EpochProgressTest, PrintLineClearsTheBarPrintsAndRedraws) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kBar, out.file(), true, &env, 1, 1, 2);
  env.Advance(absl::Seconds(1));
  progress.Update(1, 0.5, 0.5);
  progress.PrintLine(out.file(), "a message");
  const std::string bar =
      "1/2 [==============>...............] - ETA: 1s - 1s/step - "
      "loss: 0.5000 - accuracy: 0.5000\x1b[K\r";
  EXPECT_EQ(out.Text(), "Epoch 1/1\n" + bar + "\x1b[K" + "a message\n" + bar);
}

TEST(EpochProgressTest, PrintLineWithoutABarPrintsOnlyTheLine) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kLines, out.file(), false, &env, 1, 1,
                         2);
  progress.PrintLine(out.file(), "a message");
  EXPECT_EQ(out.Text(), "Epoch 1/1\na message\n");
}

TEST(EpochProgressTest, EndBarEndsTheLineOnceAndPrintLineDrawsNoBar) {
  FakeEnv env;
  Capture out;
  EpochProgress progress(ProgressMode::kBar, out.file(), true, &env, 1, 1, 2);
  env.Advance(absl::Seconds(1));
  progress.Update(1, 0.5, 0.5);
  progress.EndBar();
  progress.EndBar();  // Nothing drawn any more.
  progress.PrintLine(out.file(), "registering again");
  EXPECT_EQ(out.Text(),
            "Epoch 1/1\n"
            "1/2 [==============>...............] - ETA: 1s - 1s/step - "
            "loss: 0.5000 - accuracy: 0.5000\x1b[K\r\n"
            "registering again\n");
}

TEST(EpochProgressTest, InterruptedBarEndsItsLine) {
  FakeEnv env;
  Capture out;
  {
    EpochProgress progress(ProgressMode::kBar, out.file(), true, &env, 1, 1, 2);
    env.Advance(absl::Seconds(1));
    progress.Update(1, 0.5, 0.5);
  }
  const std::string text = out.Text();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(text.substr(text.size() - 5), "\x1b[K\r\n");
}

// The signal handler's path: a bar drawn on stdout is blanked (terminal) or
// ended (elsewhere), once; nothing is written without one.
TEST(EpochProgressTest, SignalPathClearsABarOnStdout) {
  Capture out;
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  ASSERT_GE(saved, 0);
  ASSERT_EQ(dup2(fileno(out.file()), STDOUT_FILENO), STDOUT_FILENO);
  std::string written, ended;
  {
    FakeEnv env;
    EpochProgress progress(ProgressMode::kBar, stdout, true, &env, 1, 1, 2);
    env.Advance(absl::Seconds(1));
    progress.Update(1, 0.5, 0.5);
    ClearProgressBarForSignal();
    ClearProgressBarForSignal();  // No bar any more: nothing.
    std::fflush(stdout);
    written = out.Text();
    progress.EndBar();  // The handler ended the line: no second line end.
    std::fflush(stdout);
    ended = out.Text();
    env.Advance(absl::Seconds(1));
    progress.Update(2, 0.5, 0.5);  // Drawn again.
    progress.Finish(EpochResult{});
    std::fflush(stdout);
    ClearProgressBarForSignal();  // Finished: nothing.
  }
  std::fflush(stdout);
  const std::string after = out.Text();
  ASSERT_EQ(dup2(saved, STDOUT_FILENO), STDOUT_FILENO);
  close(saved);
  ASSERT_GE(written.size(), 7u);
  EXPECT_EQ(written.substr(written.size() - 7), "\x1b[K\r\x1b[K");
  EXPECT_EQ(ended, written);
  EXPECT_EQ(after.back(), '\n');
  EXPECT_EQ(after.substr(after.size() - 5), "\x1b[K\r\n");
}

TEST(ProgressModeTest, ParsesTheNamedModes) {
  EXPECT_EQ(*ParseProgressMode("bar"), ProgressMode::kBar);
  EXPECT_EQ(*ParseProgressMode("lines"), ProgressMode::kLines);
  EXPECT_EQ(*ParseProgressMode("none"), ProgressMode::kNone);
  EXPECT_FALSE(ParseProgressMode("fancy").ok());
}

}  // namespace
}  // namespace lockstep
