// WeightsFileWriter: the model of a core restored to a known version, read
// back from the file.
#include "server/daemon/weights_file_writer.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "common/formats/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/daemon_test_util.h"

namespace lockstep {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(WeightsFileWriterTest, WritesTheNewestVersionsTensorsInOrder) {
  FakeEnv clock;
  std::unique_ptr<ParameterServer> core = TwoWorkerCore(&clock);
  ASSERT_TRUE(core->Restore(CheckpointAt(10)).ok());
  const std::string path = NewTempDir() + "/model.safetensors";
  LogLines log;
  WeightsFileWriter writer(path, core.get(), Env::Default(), absl::Seconds(1),
                           log.Log());
  EXPECT_EQ(writer.path(), path);
  absl::StatusOr<int64_t> version = writer.Write();
  ASSERT_TRUE(version.ok()) << version.status();
  EXPECT_EQ(*version, 10);
  EXPECT_THAT(log.lines,
              ElementsAre(absl::StrCat("weights of version 10 in ", path)));
  absl::StatusOr<std::vector<NamedTensor>> tensors = ReadSafetensors(path);
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  const std::vector<float> w = WeightsAt(10);
  EXPECT_EQ((*tensors)[0].info.name, "dense_0/kernel");
  EXPECT_EQ((*tensors)[0].values, std::vector<float>(w.begin(), w.begin() + 3));
  EXPECT_EQ((*tensors)[1].info.name, "dense_0/bias");
  EXPECT_EQ((*tensors)[1].values, std::vector<float>(w.begin() + 3, w.end()));
}

TEST(WeightsFileWriterTest, NothingIsWrittenBeforeVersionZero) {
  FakeEnv clock;
  std::unique_ptr<ParameterServer> core = TwoWorkerCore(&clock);
  const std::string path = NewTempDir() + "/model.safetensors";
  LogLines log;
  WeightsFileWriter writer(path, core.get(), Env::Default(), absl::Seconds(1),
                           log.Log());
  EXPECT_EQ(writer.Write().status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(log.lines, IsEmpty());
  EXPECT_FALSE(Env::Default()->Stat(path).ok());
}

}  // namespace
}  // namespace lockstep
