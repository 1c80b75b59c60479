// TensorBoard event files byte for byte: CRC-32C, the TFRecord framing,
// the hand-encoded Event protos, and a file read back record by record.
// (tests/python/test_tensorboard.py reads a real job's files with
// TensorBoard's own reader.)
#include "worker/train/tensorboard_writer.h"

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <tuple>
#include <vector>

#include "common/base/env.h"
#include "common/testing/fault_injection_env.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace lockstep {
namespace {

using ::testing::HasSubstr;

std::string Bytes(std::vector<int> bytes) {
  std::string s;
  for (int b : bytes) s.push_back(static_cast<char>(b));
  return s;
}

uint64_t ReadLittleEndian(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= uint64_t{static_cast<uint8_t>(s[at + i])} << (8 * i);
  }
  return v;
}

TEST(Crc32cTest, KnownValues) {
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(Crc32c("123456789"), 0xE3069283u);            // The check value.
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8A9136AAu);  // RFC 3720.
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62A8AB43u);
}

TEST(Crc32cTest, MaskRotatesAndAddsTheDelta) {
  const uint32_t crc = Crc32c("123456789");
  EXPECT_EQ(MaskedCrc32c("123456789"),
            static_cast<uint32_t>(((crc >> 15) | (crc << 17)) + 0xa282ead8u));
}

TEST(EventEncodingTest, FileVersionEvent) {
  // wall_time 1.5 (field 1, fixed64), file_version (field 3).
  EXPECT_EQ(
      EncodeFileVersionEvent(1.5),
      Bytes({0x09, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f, 0x1a, 13}) + "brain.Event:2");
}

TEST(EventEncodingTest, ScalarEvent) {
  // wall_time 1.5, step 300 (varint ac 02), summary (field 5) { value
  // (field 1) { tag "loss" (field 1), simple_value 0.5f (field 2) } }.
  EXPECT_EQ(EncodeScalarEvent(1.5, 300, "loss", 0.5f),
            Bytes({0x09, 0,    0,    0,    0,    0,    0,  0xf8, 0x3f,
                   0x10, 0xac, 0x02, 0x2a, 13,   0x0a, 11, 0x0a, 4,
                   'l',  'o',  's',  's',  0x15, 0,    0,  0,    0x3f}));
}

TEST(EventEncodingTest, RecordFraming) {
  const std::string record = EncodeRecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(record.substr(0, 8), Bytes({3, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(ReadLittleEndian(record, 8, 4), MaskedCrc32c(record.substr(0, 8)));
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(ReadLittleEndian(record, 15, 4), MaskedCrc32c("abc"));
}

TEST(EventFileWriterTest, WritesFileVersionThenScalars) {
  const std::string dir = ::testing::TempDir() + "/tb_writer_test/run";
  std::filesystem::remove_all(dir);
  FakeEnv env(absl::FromUnixSeconds(1700000000));
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(dir, &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  EXPECT_EQ(path.rfind(dir + "/events.out.tfevents.1700000000.", 0), 0u)
      << path;
  env.Advance(absl::Milliseconds(500));
  ASSERT_TRUE((*writer)->WriteScalar("loss", 1, 0.5f).ok());
  ASSERT_TRUE((*writer)->Flush().ok());
  writer->reset();
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const std::string expected =
      EncodeRecord(EncodeFileVersionEvent(1700000000.0)) +
      EncodeRecord(EncodeScalarEvent(1700000000.5, 1, "loss", 0.5f));
  EXPECT_EQ(file, expected);
}

TEST(EventFileWriterTest, UnwritableDirectoryIsUnavailable) {
  const std::string file = ::testing::TempDir() + "/tb_writer_test_file";
  std::ofstream(file) << "not a directory";
  FakeEnv env;
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(file + "/sub", &env);
  ASSERT_FALSE(writer.ok());
  EXPECT_EQ(writer.status().code(), absl::StatusCode::kUnavailable);
}

// A full disk while events are written out: the callback says so
// (RESOURCE_EXHAUSTED naming the file), stops writing, and what was written
// before is intact.
TEST(TensorBoardCallbackTest, AFullDiskIsReportedAndEarlierRecordsKept) {
  const std::string dir = ::testing::TempDir() + "/tb_full_disk_test";
  std::filesystem::remove_all(dir);
  FakeEnv clock(absl::FromUnixSeconds(1700000000));
  FaultInjectionEnv env(&clock);
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(dir, &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  const std::string header = EncodeRecord(EncodeFileVersionEvent(1700000000.0));
  TensorBoardCallback callback(*std::move(writer));
  env.FillDiskAfter(10);  // Less than one scalar's record.
  EpochLogs epoch;
  epoch.epoch = 1;
  callback.OnEpochEnd(epoch);  // Four scalars, then a flush.
  EXPECT_EQ(callback.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(callback.status().message()), HasSubstr(path));
  env.Heal();
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  ASSERT_EQ(file.size(), header.size() + 10);
  EXPECT_EQ(file.substr(0, header.size()), header);
}

TEST(TensorBoardCallbackTest, WritesTheTagsOfStepsAndEpochs) {
  const std::string dir = ::testing::TempDir() + "/tb_callback_test";
  std::filesystem::remove_all(dir);
  FakeEnv env(absl::FromUnixSeconds(1700000000));
  absl::StatusOr<std::unique_ptr<EventFileWriter>> writer =
      EventFileWriter::Create(dir, &env);
  ASSERT_TRUE(writer.ok()) << writer.status();
  const std::string path = (*writer)->path();
  TensorBoardCallback callback(*std::move(writer));
  StepLogs step;
  step.step = 4;
  step.batch_loss = 0.5;
  step.batch_accuracy = 0.25;
  step.examples_per_sec = 1000;
  step.step_seconds = 0.125;
  step.learning_rate = 0.001;
  callback.OnStepEnd(step);
  EpochLogs epoch;
  epoch.epoch = 1;
  epoch.loss = 0.75;
  epoch.accuracy = 0.5;
  epoch.examples_per_sec = 2000;
  epoch.learning_rate = 0.001;
  epoch.has_validation = true;
  epoch.val_loss = 1.5;
  epoch.val_accuracy = 0.375;
  callback.OnEpochEnd(epoch);
  ASSERT_TRUE(callback.status().ok()) << callback.status();
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const double t = 1700000000.0;
  std::string expected = EncodeRecord(EncodeFileVersionEvent(t));
  for (const auto& [tag, step_number, value] :
       std::vector<std::tuple<const char*, int64_t, float>>{
           {"step/loss", 4, 0.5f},
           {"step/accuracy", 4, 0.25f},
           {"step/examples_per_sec", 4, 1000.0f},
           {"step/seconds", 4, 0.125f},
           {"step/learning_rate", 4, 0.001f},
           {"epoch/loss", 1, 0.75f},
           {"epoch/accuracy", 1, 0.5f},
           {"epoch/examples_per_sec", 1, 2000.0f},
           {"epoch/learning_rate", 1, 0.001f},
           {"epoch/val_loss", 1, 1.5f},
           {"epoch/val_accuracy", 1, 0.375f}}) {
    expected += EncodeRecord(EncodeScalarEvent(t, step_number, tag, value));
  }
  EXPECT_EQ(file, expected);
}

}  // namespace
}  // namespace lockstep
