#include "server/ctl/trace_merge.h"

#include <string>

#include "common/formats/json_value.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

TEST(TraceMergeTest, KeepsEveryEventAndSeparatesProcesses) {
  const std::string server =
      R"({"traceEvents":[{"name":"process_name","ph":"M","pid":7,"tid":0,)"
      R"("args":{"name":"lockstep_server shard 0"}},)"
      R"({"name":"apply","ph":"X","ts":10.5,"dur":1,"pid":7,"tid":1}]})";
  // Another host's process with the same pid, in the bare array form.
  const std::string worker =
      R"([{"name":"compute","ph":"X","ts":9,"dur":2.25,"pid":7,"tid":1},)"
      R"({"name":"push","ph":"X","ts":9.5,"dur":0.5,"pid":8,"tid":1}])";
  absl::StatusOr<std::string> merged =
      MergeTraces({{"server.json", server}, {"worker.json", worker}});
  ASSERT_TRUE(merged.ok()) << merged.status();
  absl::StatusOr<JsonValue> doc = JsonValue::Parse(*merged);
  ASSERT_TRUE(doc.ok()) << doc.status();
  const std::vector<JsonValue>& events = doc->Find("traceEvents")->array();
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].Find("pid")->number(), 7);
  EXPECT_EQ(events[1].ToJson(),
            R"({"name":"apply","ph":"X","ts":10.5,"dur":1,"pid":7,"tid":1})");
  // The worker file's pid 7 became a fresh one, and 8 stayed.
  EXPECT_EQ(events[2].Find("pid")->number(), 1);
  EXPECT_EQ(events[2].Find("dur")->ToJson(), "2.25");
  EXPECT_EQ(events[3].Find("pid")->number(), 8);
}

TEST(TraceMergeTest, NamesTheFileThatIsNotATrace) {
  EXPECT_THAT(MergeTraces({{"a.json", "{\"x\":1}"}}).status().message(),
              HasSubstr("a.json: not a trace"));
  EXPECT_THAT(MergeTraces({{"b.json", "{"}}).status().message(),
              HasSubstr("b.json: not JSON"));
}

}  // namespace
}  // namespace lockstep
