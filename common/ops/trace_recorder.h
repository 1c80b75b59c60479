// Chrome trace-event JSON for Perfetto (ui.perfetto.dev) and chrome://tracing.
//
// TraceRecorder owns one trace file and a bounded in-memory buffer of
// complete events ("ph":"X"). Complete() appends to the buffer under a short
// lock; a background thread writes the buffer out every `flush_every` (and
// sooner when it is half full), and the destructor writes the rest. After
// every write the file is a whole JSON document:
//
//   {"displayTimeUnit":"ms","traceEvents":[
//   {"name":"process_name","ph":"M","pid":4242,"tid":0,"args":{"name":"lockstep_worker rank 0"}},
//   {"name":"compute","cat":"worker","ph":"X","ts":1718000000123456.789,"dur":812.5,"pid":4242,"tid":1,"args":{"step":7}},
//   ...
//   ],"otherData":{"clock":"CLOCK_REALTIME","dropped_events":"0"}}
//
// ts and dur are microseconds; ts counts from the Unix epoch on the
// realtime clock, so the files of several processes (and hosts with
// synchronized clocks) share one time axis and can be merged (lockstep_ctl
// merge-traces). pid is the process id; tid a track chosen by the caller.
// When the buffer is full, or `max_events` have been written, further
// events are dropped and counted in otherData.dropped_events.
//
// Thread-safe.
#ifndef LOCKSTEP_COMMON_OPS_TRACE_RECORDER_H_
#define LOCKSTEP_COMMON_OPS_TRACE_RECORDER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

// One integer argument of an event; a null key means none.
struct TraceArg {
  const char* key = nullptr;  // A string literal.
  int64_t value = 0;
};

struct TraceRecorderOptions {
  std::string path;
  std::string process_name;  // Shown as the process's name.
  int sort_index = 0;        // Viewers order processes by it.
  size_t buffer_events = 1 << 16;     // Held between writes.
  int64_t max_events = 4'000'000;     // Written in all (~100 bytes each).
  absl::Duration flush_every = absl::Seconds(1);
};

class TraceRecorder final {
 public:
  // Creates (truncates) the file and writes its head. INVALID_ARGUMENT for
  // an empty path or zero buffer, UNAVAILABLE when the file cannot be made.
  static absl::StatusOr<std::unique_ptr<TraceRecorder>> Create(
      const TraceRecorderOptions& options);
  // Writes what is buffered and stops the writer thread.
  ~TraceRecorder();

  TraceRecorder(const TraceRecorder&) = delete;
  TraceRecorder& operator=(const TraceRecorder&) = delete;

  // Records a complete event on track `tid`. `name` and `category` must be
  // string literals (only the pointers are kept until the next write).
  void Complete(const char* name, const char* category, int tid,
                absl::Time start, absl::Time end, TraceArg a = {},
                TraceArg b = {});

  // Names track `tid` in viewers; later calls for the same tid are ignored.
  void NameThread(int tid, const std::string& name);

  // Writes the buffer now; returns the first write error so far.
  absl::Status Flush();

  int64_t dropped() const;
  const std::string& path() const { return options_.path; }

 private:
  struct Event {
    const char* name;
    const char* category;
    int tid;
    int64_t start_ns;  // Unix epoch, realtime clock.
    int64_t duration_ns;
    TraceArg a, b;
  };

  TraceRecorder(const TraceRecorderOptions& options, int fd, int pid);
  void WriterLoop();
  std::string FormatEvent(const Event& event) const;

  const TraceRecorderOptions options_;
  const int fd_;
  const int pid_;

  mutable absl::Mutex mu_;
  std::vector<Event> buffer_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> metadata_ ABSL_GUARDED_BY(mu_);  // JSON objects.
  absl::flat_hash_set<int> named_tids_ ABSL_GUARDED_BY(mu_);
  int64_t accepted_ ABSL_GUARDED_BY(mu_) = 0;  // Buffered or written.
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex file_mu_;  // One write at a time; taken before mu_.
  int64_t events_end_ ABSL_GUARDED_BY(file_mu_) = 0;  // Offset after events.
  bool wrote_event_ ABSL_GUARDED_BY(file_mu_) = false;
  absl::Status write_status_ ABSL_GUARDED_BY(file_mu_);

  std::thread writer_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_OPS_TRACE_RECORDER_H_
