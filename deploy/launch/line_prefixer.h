// Tags one child's output stream with a prefix such as "[worker0] ".
#ifndef LOCKSTEP_DEPLOY_LAUNCH_LINE_PREFIXER_H_
#define LOCKSTEP_DEPLOY_LAUNCH_LINE_PREFIXER_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace lockstep {

// Splits a byte stream into segments that end at '\n' or '\r' and emits each
// segment with a prefix. A segment is held back until its terminator arrives,
// so two children's output never mixes within a line.
//
// '\r' is how progress bars redraw in place: they write "\r<bar>" over and
// over. A '\r'-ended segment is emitted without a line end, and the '\r' is
// written before the next segment's prefix ("\r[worker0] <bar>"), so the
// prefixed bar still redraws on a terminal and the cursor rests after the
// bar text, as it would without the launcher.
//
// Segments longer than kMaxSegment are emitted as lines of their own, so a
// child that never ends a line cannot grow the buffer without bound.
//
// Not thread-safe: one instance per child, used by one thread.
class LinePrefixer final {
 public:
  static constexpr size_t kMaxSegment = 64 * 1024;

  explicit LinePrefixer(std::string prefix);

  // Appends to *out the prefixed form of every segment that `data` completes;
  // keeps the unterminated rest for later.
  void Feed(absl::string_view data, std::string* out);

  // Emits the held-back partial segment, if any, and ends an open line, so
  // the next writer starts at a fresh line. Called when the child exits.
  void Flush(std::string* out);

  // True when the text emitted so far leaves the cursor mid-line: a progress
  // bar is showing. Whoever writes next to the same output ends that line
  // first and calls LineEnded().
  bool line_open() const { return line_open_; }
  void LineEnded() { line_open_ = false; }

 private:
  // Emits one complete segment; `terminator` is '\n' or '\r'.
  void Emit(absl::string_view segment, char terminator, std::string* out);

  const std::string prefix_;
  std::string partial_;      // Bytes after the last terminator.
  bool pending_cr_ = false;  // The last segment ended in '\r'.
  bool line_open_ = false;   // Emitted text does not end in '\n'.
};

}  // namespace lockstep

#endif  // LOCKSTEP_DEPLOY_LAUNCH_LINE_PREFIXER_H_
