#include "worker/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace lockstep {
namespace {

constexpr int kBarWidth = 30;
constexpr char kEraseToEnd[] = "\x1b[K";

// What a signal handler finds on stdout's current line: a lock-free atomic,
// as a handler may read it.
enum BarState : int { kNoBar = 0, kTerminalBar = 1, kPaddedBar = 2 };
std::atomic<int> bar_state{kNoBar};
static_assert(std::atomic<int>::is_always_lock_free);

int Digits(int64_t n) {
  int digits = 1;
  for (; n >= 10; n /= 10) ++digits;
  return digits;
}

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

std::string FormatEta(double seconds) {
  const int64_t eta = static_cast<int64_t>(std::max(0.0, seconds));
  if (eta > 3600) {
    return absl::StrFormat("%d:%02d:%02d", eta / 3600, (eta % 3600) / 60,
                           eta % 60);
  }
  if (eta > 60) return absl::StrFormat("%d:%02d", eta / 60, eta % 60);
  return absl::StrFormat("%ds", eta);
}

std::string FormatTimePerStep(double seconds) {
  if (seconds >= 1 || seconds <= 0) {
    return absl::StrFormat("%.0fs/step", std::max(0.0, seconds));
  }
  if (seconds >= 1e-3) return absl::StrFormat("%.0fms/step", seconds * 1e3);
  return absl::StrFormat("%.0fus/step", seconds * 1e6);
}

EpochProgress::EpochProgress(ProgressMode mode, FILE* out, bool terminal,
                             Env* env, int epoch, int epochs, int64_t steps)
    : mode_(mode),
      out_(out),
      terminal_(terminal),
      env_(env),
      steps_(steps),
      start_(env->Now()) {
  if (mode_ == ProgressMode::kNone) return;
  std::fprintf(out_, "Epoch %d/%d\n", epoch, epochs);
  std::fflush(out_);
}

EpochProgress::~EpochProgress() { EndBar(); }

void EpochProgress::EndBar() {
  if (drawn_.empty()) return;
  drawn_.clear();
  // A signal handler that cleared the bar (ClearProgressBarForSignal) has
  // ended its line already.
  if (out_ == stdout && bar_state.exchange(kNoBar) == kNoBar) return;
  std::fputs("\n", out_);
  std::fflush(out_);
}

std::string EpochProgress::Bar(int64_t done) const {
  const int filled =
      steps_ > 0 ? static_cast<int>(kBarWidth * done / steps_) : kBarWidth;
  std::string bar = absl::StrFormat("%*d/%d [", Digits(steps_), done, steps_);
  if (filled > 0) {
    bar.append(filled - 1, '=');
    bar += done < steps_ ? '>' : '=';
  }
  bar.append(kBarWidth - filled, '.');
  return bar + "]";
}

std::string EpochProgress::StepText(int64_t done, double elapsed, double loss,
                                    double accuracy) const {
  const double per_step = done > 0 ? elapsed / done : 0;
  return absl::StrFormat("%s - ETA: %s - %s - loss: %.4f - accuracy: %.4f",
                         Bar(done), FormatEta(per_step * (steps_ - done)),
                         FormatTimePerStep(per_step), loss, accuracy);
}

std::string EpochProgress::FinalText(double elapsed,
                                     const EpochResult& r) const {
  std::string text = absl::StrFormat(
      "%s - %.0fs %s - loss: %.4f - accuracy: %.4f", Bar(steps_), elapsed,
      FormatTimePerStep(steps_ > 0 ? elapsed / steps_ : 0), r.loss, r.accuracy);
  if (r.has_validation) {
    absl::StrAppendFormat(&text, " - val_loss: %.4f - val_accuracy: %.4f",
                          r.val_loss, r.val_accuracy);
  }
  absl::StrAppendFormat(&text, " - %.0f examples/s", r.examples_per_sec);
  return text;
}

double EpochProgress::Elapsed() const {
  return absl::ToDoubleSeconds(env_->Now() - start_);
}

void EpochProgress::Draw(const std::string& text) {
  // Text first, then '\r': a reader that forwards whole segments (the
  // launcher) shows each state at once, and the next one overwrites it.
  std::fputs(text.c_str(), out_);
  if (terminal_) {
    std::fputs(kEraseToEnd, out_);
  } else if (text.size() < widest_) {
    std::fputs(std::string(widest_ - text.size(), ' ').c_str(), out_);
  }
  std::fputs("\r", out_);
  std::fflush(out_);
  widest_ = std::max(widest_, text.size());
  drawn_ = text;
  if (out_ == stdout) bar_state.store(terminal_ ? kTerminalBar : kPaddedBar);
}

void EpochProgress::Clear() {
  // The cursor rests at the start of the bar's line.
  if (terminal_) {
    std::fputs(kEraseToEnd, out_);
  } else {
    std::fprintf(out_, "%s\r", std::string(widest_, ' ').c_str());
  }
  std::fflush(out_);
  if (out_ == stdout) bar_state.store(kNoBar);
}

void EpochProgress::Update(int64_t done, double loss, double accuracy) {
  if (mode_ == ProgressMode::kBar) {
    // Redraw at most ten times a second: the terminal is not the bottleneck.
    const absl::Time now = env_->Now();
    if (now - last_draw_ < absl::Milliseconds(100)) return;
    last_draw_ = now;
    Draw(StepText(done, Elapsed(), loss, accuracy));
  } else if (mode_ == ProgressMode::kLines && steps_ >= 4 &&
             next_quarter_ < 4 && done >= steps_ * next_quarter_ / 4) {
    ++next_quarter_;
    std::fprintf(out_, "%s\n",
                 StepText(done, Elapsed(), loss, accuracy).c_str());
    std::fflush(out_);
  }
}

void EpochProgress::Finish(const EpochResult& result) {
  if (mode_ == ProgressMode::kNone) return;
  const std::string text = FinalText(Elapsed(), result);
  if (mode_ == ProgressMode::kBar) {
    Draw(text);
    EndBar();
  } else {
    std::fprintf(out_, "%s\n", text.c_str());
  }
  std::fflush(out_);
}

void EpochProgress::PrintLine(FILE* stream, absl::string_view line) {
  const std::string bar = drawn_;
  if (!bar.empty()) Clear();
  std::fprintf(stream, "%.*s\n", static_cast<int>(line.size()), line.data());
  std::fflush(stream);
  if (!bar.empty()) Draw(bar);
}

void ClearProgressBarForSignal() {
  const int state = bar_state.exchange(kNoBar);
  ssize_t ignored = 0;
  if (state == kTerminalBar) {
    ignored = write(STDOUT_FILENO, kEraseToEnd, sizeof(kEraseToEnd) - 1);
  } else if (state == kPaddedBar) {
    ignored = write(STDOUT_FILENO, "\n", 1);
  }
  (void)ignored;
}

}  // namespace lockstep
