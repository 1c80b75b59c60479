#include "worker/train/progress.h"

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {
constexpr int kBarWidth = 30;
}  // namespace

absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view text) {
  if (text == "bar") return ProgressMode::kBar;
  if (text == "lines") return ProgressMode::kLines;
  if (text == "none") return ProgressMode::kNone;
  if (text == "auto") {
    return isatty(STDOUT_FILENO) ? ProgressMode::kBar : ProgressMode::kLines;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("must be auto, bar, lines or none, got \"", text, "\""));
}

EpochProgress::EpochProgress(ProgressMode mode, FILE* out, int epoch,
                             int epochs, int64_t steps)
    : mode_(mode), out_(out), epoch_(epoch), epochs_(epochs), steps_(steps) {}

std::string EpochProgress::Line(int64_t done, double loss, double accuracy,
                                double examples_per_sec) const {
  const int filled =
      steps_ > 0 ? static_cast<int>(kBarWidth * done / steps_) : kBarWidth;
  std::string bar(filled, '=');
  if (filled < kBarWidth) bar += '>';
  bar.resize(kBarWidth, ' ');
  return absl::StrFormat(
      "Epoch %d/%d [%s] %d/%d - loss %.4f - accuracy %.4f - %.0f examples/s",
      epoch_, epochs_, bar, done, steps_, loss, accuracy, examples_per_sec);
}

void EpochProgress::Update(int64_t step_in_epoch, double loss, double accuracy,
                           double examples_per_sec) {
  if (mode_ == ProgressMode::kBar) {
    // Redraw at most ten times a second: the terminal is not the bottleneck.
    const absl::Time now = absl::Now();
    if (now - last_draw_ < absl::Milliseconds(100)) return;
    last_draw_ = now;
    // Text first, then '\r': a reader that forwards whole segments (the
    // launcher) shows each state at once, and the next one overwrites it.
    std::fprintf(out_, "%s\r",
                 Line(step_in_epoch, loss, accuracy, examples_per_sec).c_str());
    std::fflush(out_);
  } else if (mode_ == ProgressMode::kLines && steps_ >= 4 &&
             next_quarter_ < 4 && step_in_epoch >= steps_ * next_quarter_ / 4) {
    ++next_quarter_;
    std::fprintf(out_, "%s\n",
                 Line(step_in_epoch, loss, accuracy, examples_per_sec).c_str());
    std::fflush(out_);
  }
}

void EpochProgress::Finish(double loss, double accuracy,
                           double examples_per_sec) {
  if (mode_ == ProgressMode::kNone) return;
  std::fprintf(out_, "%s\n",
               Line(steps_, loss, accuracy, examples_per_sec).c_str());
  std::fflush(out_);
}

}  // namespace lockstep
