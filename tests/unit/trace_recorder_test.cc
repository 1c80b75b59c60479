#include "common/ops/trace_recorder.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/formats/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr && *dir ? dir : "/tmp", "/lockstep_",
                      getpid(), "_", name);
}

JsonValue ReadTrace(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<JsonValue> doc = JsonValue::Parse(ss.str());
  EXPECT_TRUE(doc.ok()) << doc.status() << "\n" << ss.str();
  return doc.ok() ? *doc : JsonValue();
}

const JsonValue& Events(const JsonValue& doc) {
  static const JsonValue empty;
  const JsonValue* events = doc.Find("traceEvents");
  return events != nullptr ? *events : empty;
}

TEST(TraceRecorderTest, WritesCompleteEventsInMicroseconds) {
  TraceRecorderOptions options;
  options.path = TempPath("trace1.json");
  options.process_name = "lockstep_worker rank 3";
  options.sort_index = 7;
  absl::StatusOr<std::unique_ptr<TraceRecorder>> trace =
      TraceRecorder::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  // The file is a whole document from the start.
  EXPECT_EQ(Events(ReadTrace(options.path)).array().size(), 2u);
  (*trace)->NameThread(1, "training");
  (*trace)->NameThread(1, "ignored");
  const absl::Time start = absl::FromUnixNanos(1718000000123456789);
  (*trace)->Complete("compute", "worker", 1, start,
                     start + absl::Nanoseconds(812500), {"step", 7});
  (*trace)->Complete("apply", "server", 2, start, start, {"step", 1},
                     {"rank", 0});
  ASSERT_TRUE((*trace)->Flush().ok());
  const JsonValue doc = ReadTrace(options.path);
  const std::vector<JsonValue>& events = Events(doc).array();
  ASSERT_EQ(events.size(), 5u);
  EXPECT_EQ(events[0].ToJson(),
            absl::StrCat(R"({"name":"process_name","ph":"M","pid":)", getpid(),
                         R"(,"tid":0,"args":{"name":"lockstep_worker rank 3"}})"));
  EXPECT_EQ(events[1].Find("args")->Find("sort_index")->number(), 7);
  EXPECT_EQ(events[2].Find("args")->Find("name")->string(), "training");
  EXPECT_EQ(events[3].ToJson(),
            absl::StrCat(R"({"name":"compute","cat":"worker","ph":"X",)",
                         R"("ts":1718000000123456.789,"dur":812.500,"pid":)",
                         getpid(), R"(,"tid":1,"args":{"step":7}})"));
  EXPECT_EQ(events[4].Find("args")->ToJson(), R"({"step":1,"rank":0})");
  EXPECT_EQ(doc.Find("otherData")->Find("dropped_events")->string(), "0");
  trace->reset();  // Flushes again: still one whole document.
  EXPECT_EQ(Events(ReadTrace(options.path)).array().size(), 5u);
  unlink(options.path.c_str());
}

TEST(TraceRecorderTest, DropsWhatDoesNotFitAndSaysSo) {
  TraceRecorderOptions options;
  options.path = TempPath("trace2.json");
  options.buffer_events = 4;
  options.max_events = 6;
  options.flush_every = absl::Hours(1);  // Only when half full.
  absl::StatusOr<std::unique_ptr<TraceRecorder>> trace =
      TraceRecorder::Create(options);
  ASSERT_TRUE(trace.ok()) << trace.status();
  for (int i = 0; i < 20; ++i) {
    (*trace)->Complete("e", "c", 1, absl::Now(), absl::Now(), {"i", i});
    if (i % 2 == 1) {
      ASSERT_TRUE((*trace)->Flush().ok());
    }
  }
  EXPECT_EQ((*trace)->dropped(), 14);
  trace->reset();
  const JsonValue doc = ReadTrace(options.path);
  EXPECT_EQ(Events(doc).array().size(), 2u + 6u);
  EXPECT_EQ(doc.Find("otherData")->Find("dropped_events")->string(), "14");
  unlink(options.path.c_str());
}

TEST(TraceRecorderTest, ReportsFilesItCannotMake) {
  TraceRecorderOptions options;
  options.path = "/nonexistent-dir/trace.json";
  EXPECT_EQ(TraceRecorder::Create(options).status().code(),
            absl::StatusCode::kUnavailable);
  options.path = "";
  EXPECT_EQ(TraceRecorder::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lockstep
