#include "common/ops/trace_recorder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/formats/json_writer.h"

namespace lockstep {
namespace {

constexpr char kHead[] = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";

// Microseconds with three decimals, from nanoseconds.
std::string Micros(int64_t ns) {
  const char* sign = ns < 0 ? "-" : "";
  const uint64_t abs = ns < 0 ? static_cast<uint64_t>(-(ns + 1)) + 1
                              : static_cast<uint64_t>(ns);
  return absl::StrFormat("%s%d.%03d", sign, abs / 1000, abs % 1000);
}

std::string Metadata(absl::string_view name, int pid, int tid,
                     absl::string_view arg_key, const std::string& arg_json) {
  return absl::StrCat("{\"name\":", JsonQuote(name),
                      ",\"ph\":\"M\",\"pid\":", pid, ",\"tid\":", tid,
                      ",\"args\":{\"", arg_key, "\":", arg_json, "}}");
}

absl::Status WriteAt(int fd, absl::string_view data, int64_t offset) {
  while (!data.empty()) {
    const ssize_t n = pwrite(fd, data.data(), data.size(), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::UnavailableError(
          absl::StrCat("writing the trace: ", std::strerror(errno)));
    }
    data.remove_prefix(static_cast<size_t>(n));
    offset += n;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceRecorder>> TraceRecorder::Create(
    const TraceRecorderOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError("the trace needs a file path");
  }
  if (options.buffer_events == 0 || options.max_events < 0) {
    return absl::InvalidArgumentError("the trace buffer must hold events");
  }
  const int fd = open(options.path.c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot create the trace file ", options.path, ": ",
        std::strerror(errno)));
  }
  std::unique_ptr<TraceRecorder> recorder(
      new TraceRecorder(options, fd, static_cast<int>(getpid())));
  if (absl::Status s = recorder->Flush(); !s.ok()) return s;
  return recorder;
}

TraceRecorder::TraceRecorder(const TraceRecorderOptions& options, int fd,
                             int pid)
    : options_(options), fd_(fd), pid_(pid) {
  {
    absl::MutexLock lock(&mu_);
    buffer_.reserve(options_.buffer_events);
    metadata_.push_back(Metadata("process_name", pid_, 0, "name",
                                 JsonQuote(options_.process_name)));
    metadata_.push_back(Metadata("process_sort_index", pid_, 0, "sort_index",
                                 absl::StrCat(options_.sort_index)));
  }
  {
    absl::MutexLock lock(&file_mu_);
    write_status_ = WriteAt(fd_, kHead, 0);
    events_end_ = sizeof(kHead) - 1;
  }
  writer_ = std::thread([this]() { WriterLoop(); });
}

TraceRecorder::~TraceRecorder() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
  if (absl::Status s = Flush(); !s.ok()) {
    std::fprintf(stderr, "lockstep: trace %s: %s\n", options_.path.c_str(),
                 s.ToString().c_str());
  }
  close(fd_);
}

void TraceRecorder::Complete(const char* name, const char* category, int tid,
                             absl::Time start, absl::Time end, TraceArg a,
                             TraceArg b) {
  const int64_t start_ns = absl::ToUnixNanos(start);
  const int64_t duration_ns = std::max<int64_t>(
      0, absl::ToInt64Nanoseconds(end - start));
  absl::MutexLock lock(&mu_);
  if (buffer_.size() >= options_.buffer_events ||
      accepted_ >= options_.max_events) {
    ++dropped_;
    return;
  }
  ++accepted_;
  buffer_.push_back(Event{name, category, tid, start_ns, duration_ns, a, b});
}

void TraceRecorder::NameThread(int tid, const std::string& name) {
  absl::MutexLock lock(&mu_);
  if (!named_tids_.insert(tid).second) return;
  metadata_.push_back(
      Metadata("thread_name", pid_, tid, "name", JsonQuote(name)));
}

int64_t TraceRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

std::string TraceRecorder::FormatEvent(const Event& e) const {
  std::string out = absl::StrCat(
      "{\"name\":\"", e.name, "\",\"cat\":\"", e.category,
      "\",\"ph\":\"X\",\"ts\":", Micros(e.start_ns),
      ",\"dur\":", Micros(e.duration_ns), ",\"pid\":", pid_,
      ",\"tid\":", e.tid);
  if (e.a.key != nullptr || e.b.key != nullptr) {
    out += ",\"args\":{";
    bool first = true;
    for (const TraceArg& arg : {e.a, e.b}) {
      if (arg.key == nullptr) continue;
      absl::StrAppend(&out, first ? "" : ",", "\"", arg.key, "\":", arg.value);
      first = false;
    }
    out += "}";
  }
  out += "}";
  return out;
}

absl::Status TraceRecorder::Flush() {
  absl::MutexLock file_lock(&file_mu_);
  std::vector<Event> events;
  std::vector<std::string> metadata;
  int64_t dropped = 0;
  {
    absl::MutexLock lock(&mu_);
    events.swap(buffer_);
    buffer_.reserve(options_.buffer_events);
    metadata.swap(metadata_);
    dropped = dropped_;
  }
  if (!write_status_.ok()) return write_status_;
  std::string text;
  auto append = [&](const std::string& json)
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(file_mu_) {
    absl::StrAppend(&text, wrote_event_ ? ",\n" : "", json);
    wrote_event_ = true;
  };
  for (const std::string& m : metadata) append(m);
  for (const Event& e : events) append(FormatEvent(e));
  // The tail is rewritten after the events each time, so the file is a
  // whole JSON document between writes.
  const std::string tail = absl::StrCat(
      "\n],\"otherData\":{\"clock\":\"CLOCK_REALTIME\",\"dropped_events\":\"",
      dropped, "\"}}\n");
  write_status_ = WriteAt(fd_, text, events_end_);
  if (!write_status_.ok()) return write_status_;
  events_end_ += static_cast<int64_t>(text.size());
  write_status_ = WriteAt(fd_, tail, events_end_);
  if (write_status_.ok() &&
      ftruncate(fd_, events_end_ + static_cast<int64_t>(tail.size())) != 0) {
    write_status_ = absl::UnavailableError(
        absl::StrCat("truncating the trace: ", std::strerror(errno)));
  }
  return write_status_;
}

void TraceRecorder::WriterLoop() {
  while (true) {
    bool stop = false;
    {
      absl::MutexLock lock(&mu_);
      auto wanted = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stop_ || buffer_.size() >= std::max<size_t>(
                                  1, options_.buffer_events / 2);
      };
      mu_.AwaitWithTimeout(absl::Condition(&wanted), options_.flush_every);
      stop = stop_;
    }
    if (stop) return;  // The destructor writes the rest.
    Flush().IgnoreError();  // Kept in write_status_ for the next Flush().
  }
}

}  // namespace lockstep
