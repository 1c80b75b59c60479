// Per-epoch progress output of a worker, in Keras's format: an "Epoch 1/5"
// line, then a bar redrawn in place on a terminal
//   123/938 [===>..........................] - ETA: 12s - 3ms/step - loss: ...
// or a few plain lines for logs, and the epoch's final line with its time,
// validation figures and speed. Also how other output gets past a drawn
// bar: PrintLine (clear the bar, print, redraw) and, from a signal handler,
// ClearProgressBarForSignal. Writes to a FILE (stdout); not thread-safe.
#ifndef LOCKSTEP_WORKER_TRAIN_PROGRESS_H_
#define LOCKSTEP_WORKER_TRAIN_PROGRESS_H_

#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/env.h"

namespace lockstep {

enum class ProgressMode { kNone, kLines, kBar };

// "bar", "lines", "none", or "auto" (bar on a terminal, else lines).
absl::StatusOr<ProgressMode> ParseProgressMode(absl::string_view text);

// Keras's time formats: an ETA of whole seconds ("12s", "1:05", "1:02:03")
// and the time of one step ("2s/step", "3ms/step", "850us/step").
std::string FormatEta(double seconds);
std::string FormatTimePerStep(double seconds);

// What an epoch ended with. Validation figures only where has_validation.
struct EpochResult {
  double loss = 0;
  double accuracy = 0;
  double examples_per_sec = 0;  // All workers' examples per second.
  bool has_validation = false;
  double val_loss = 0;
  double val_accuracy = 0;
};

class EpochProgress final {
 public:
  // Prints the "Epoch E/N" line (bar and lines modes). `terminal`: `out` is
  // a terminal, so a redrawn bar clears the rest of its line with ESC [K;
  // elsewhere it pads with spaces over the longest text drawn before.
  // Times come from env (not owned).
  EpochProgress(ProgressMode mode, FILE* out, bool terminal, Env* env,
                int epoch, int epochs, int64_t steps);
  // Ends a bar left drawn (an interrupted epoch): EndBar.
  ~EpochProgress();
  EpochProgress(const EpochProgress&) = delete;
  EpochProgress& operator=(const EpochProgress&) = delete;

  // After each step: steps done in this epoch, and the running mean loss
  // and accuracy of this worker's batches.
  void Update(int64_t done, double loss, double accuracy);
  // Ends the epoch with its final line.
  void Finish(const EpochResult& result);
  // Prints `line` and a line end on `stream` (stdout or stderr), clearing a
  // drawn bar first and drawing it again after.
  void PrintLine(FILE* stream, absl::string_view line);
  // Ends a drawn bar's line where it stands (before the epoch is left
  // early, so that what is printed next starts a line of its own); later
  // updates draw it again.
  void EndBar();

  // The texts drawn, for `elapsed` seconds since the epoch began.
  std::string StepText(int64_t done, double elapsed, double loss,
                       double accuracy) const;
  std::string FinalText(double elapsed, const EpochResult& result) const;

 private:
  // "  5/938 [==>...]".
  std::string Bar(int64_t done) const;
  double Elapsed() const;
  // Draws `text` over the bar's line, the cursor left at its start.
  void Draw(const std::string& text);
  // Blanks the drawn bar's line.
  void Clear();

  const ProgressMode mode_;
  FILE* const out_;  // Not owned.
  const bool terminal_;
  Env* const env_;  // Not owned.
  const int64_t steps_;
  const absl::Time start_;
  absl::Time last_draw_ = absl::InfinitePast();
  int next_quarter_ = 1;
  std::string drawn_;  // The bar's text on screen; empty: none.
  size_t widest_ = 0;  // The longest text drawn (padding).
};

// Async-signal-safe: where a bar is drawn on stdout, blanks its line (on a
// terminal) or ends it, so that what the handler writes next starts a line
// of its own. The bar is drawn again at its next update.
void ClearProgressBarForSignal();

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_PROGRESS_H_
