#include "deploy/launch/line_prefixer.h"

#include <utility>

namespace lockstep {

LinePrefixer::LinePrefixer(std::string prefix) : prefix_(std::move(prefix)) {}

void LinePrefixer::Feed(absl::string_view data, std::string* out) {
  while (!data.empty()) {
    const size_t end = data.find_first_of("\r\n");
    if (end == absl::string_view::npos) {
      partial_.append(data.data(), data.size());
      if (partial_.size() >= kMaxSegment) {
        Emit(partial_, '\n', out);
        partial_.clear();
      }
      return;
    }
    if (partial_.empty()) {
      // Common case: the whole segment is in `data`; no copy.
      Emit(data.substr(0, end), data[end], out);
    } else {
      partial_.append(data.data(), end);
      Emit(partial_, data[end], out);
      partial_.clear();
    }
    data.remove_prefix(end + 1);
  }
}

void LinePrefixer::Flush(std::string* out) {
  if (!partial_.empty()) {
    Emit(partial_, '\n', out);
    partial_.clear();
  } else if (line_open_) {
    out->push_back('\n');
    line_open_ = false;
  }
  pending_cr_ = false;
}

void LinePrefixer::Emit(absl::string_view segment, char terminator,
                        std::string* out) {
  if (segment.empty()) {
    if (terminator == '\r') {
      // "\r" before a bar update: nothing to show until the update arrives.
      pending_cr_ = true;
      return;
    }
    if (line_open_) {
      // The '\n' that finishes a progress bar: end its line, no new line.
      out->push_back('\n');
      line_open_ = false;
      pending_cr_ = false;
      return;
    }
  }
  if (pending_cr_) out->push_back('\r');
  out->append(prefix_);
  out->append(segment.data(), segment.size());
  if (terminator == '\n') {
    out->push_back('\n');
    pending_cr_ = false;
    line_open_ = false;
  } else {
    pending_cr_ = true;
    line_open_ = true;
  }
}

}  // namespace lockstep
