#include "worker/train/tensorboard_writer.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/rpc/varint.h"

namespace lockstep {
namespace {

constexpr uint32_t kCrc32cPolynomial = 0x82F63B78;  // Reflected.
constexpr uint32_t kMaskDelta = 0xa282ead8;
constexpr absl::Duration kFlushEvery = absl::Seconds(5);

std::array<uint32_t, 256> MakeCrcTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t crc = i;
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 1) != 0 ? (crc >> 1) ^ kCrc32cPolynomial : crc >> 1;
    }
    table[i] = crc;
  }
  return table;
}

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  }
}

// Protobuf wire types: 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit.
void AppendTag(int field, int wire_type, std::string* out) {
  AppendVarint(static_cast<uint64_t>(field) << 3 | wire_type, out);
}

void AppendBytesField(int field, absl::string_view bytes, std::string* out) {
  AppendTag(field, 2, out);
  AppendVarint(bytes.size(), out);
  out->append(bytes.data(), bytes.size());
}

// Event.wall_time (1) and Event.step (2), the fields every event starts with.
std::string EventHeader(double wall_time, int64_t step) {
  std::string event;
  uint64_t bits;
  std::memcpy(&bits, &wall_time, sizeof(bits));
  AppendTag(1, 1, &event);
  AppendLittleEndian(bits, 8, &event);
  if (step != 0) {
    AppendTag(2, 0, &event);
    AppendVarint(static_cast<uint64_t>(step), &event);
  }
  return event;
}

// An Event's wall_time: seconds since the Unix epoch.
double UnixSeconds(absl::Time t) {
  return absl::ToDoubleSeconds(t - absl::UnixEpoch());
}

}  // namespace

uint32_t Crc32c(absl::string_view data) {
  static const std::array<uint32_t, 256> table = MakeCrcTable();
  uint32_t crc = 0xffffffff;
  for (const char c : data) {
    crc = table[(crc ^ static_cast<uint8_t>(c)) & 0xff] ^ (crc >> 8);
  }
  return crc ^ 0xffffffff;
}

uint32_t MaskedCrc32c(absl::string_view data) {
  const uint32_t crc = Crc32c(data);
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

std::string EncodeFileVersionEvent(double wall_time) {
  std::string event = EventHeader(wall_time, 0);
  AppendBytesField(3, "brain.Event:2", &event);
  return event;
}

std::string EncodeScalarEvent(double wall_time, int64_t step,
                              absl::string_view tag, float value) {
  std::string summary_value;
  AppendBytesField(1, tag, &summary_value);
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  AppendTag(2, 5, &summary_value);
  AppendLittleEndian(bits, 4, &summary_value);
  std::string summary;
  AppendBytesField(1, summary_value, &summary);
  std::string event = EventHeader(wall_time, step);
  AppendBytesField(5, summary, &event);
  return event;
}

std::string EncodeRecord(absl::string_view data) {
  std::string length;
  AppendLittleEndian(data.size(), 8, &length);
  std::string record = length;
  AppendLittleEndian(MaskedCrc32c(length), 4, &record);
  record.append(data.data(), data.size());
  AppendLittleEndian(MaskedCrc32c(data), 4, &record);
  return record;
}

absl::StatusOr<std::unique_ptr<EventFileWriter>> EventFileWriter::Create(
    const std::string& dir, Env* env) {
  RETURN_IF_ERROR(env->CreateDirs(dir));
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  const absl::Time now = env->Now();
  const std::string path = absl::StrCat(dir, "/events.out.tfevents.",
                                        absl::ToUnixSeconds(now), ".", host);
  ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file,
                   env->NewWritableFile(path));
  std::unique_ptr<EventFileWriter> writer(
      new EventFileWriter(path, std::move(file), env));
  writer->Append(EncodeFileVersionEvent(UnixSeconds(now)));
  RETURN_IF_ERROR(writer->Flush());
  return writer;
}

EventFileWriter::EventFileWriter(std::string path,
                                 std::unique_ptr<WritableFile> file, Env* env)
    : path_(std::move(path)),
      file_(std::move(file)),
      env_(env),
      last_flush_(env->Now()) {}

EventFileWriter::~EventFileWriter() {
  // What is still pending goes out; a failure here has no one to tell.
  Flush().IgnoreError();
  file_->Close().IgnoreError();
}

void EventFileWriter::Append(const std::string& event) {
  pending_ += EncodeRecord(event);
}

absl::Status EventFileWriter::WriteScalar(absl::string_view tag, int64_t step,
                                          float value) {
  const absl::Time now = env_->Now();
  Append(EncodeScalarEvent(UnixSeconds(now), step, tag, value));
  return now - last_flush_ >= kFlushEvery ? Flush() : absl::OkStatus();
}

absl::Status EventFileWriter::Flush() {
  last_flush_ = env_->Now();
  if (pending_.empty()) return absl::OkStatus();
  const std::string out = std::move(pending_);
  pending_.clear();
  return file_->Append(out);
}

TensorBoardCallback::TensorBoardCallback(
    std::unique_ptr<EventFileWriter> writer)
    : writer_(std::move(writer)) {}

void TensorBoardCallback::Write(absl::string_view tag, int64_t step,
                                double value) {
  if (!status_.ok()) return;
  status_ = writer_->WriteScalar(tag, step, static_cast<float>(value));
}

void TensorBoardCallback::OnStepEnd(const StepLogs& logs) {
  Write("step/loss", logs.step, logs.batch_loss);
  Write("step/accuracy", logs.step, logs.batch_accuracy);
  Write("step/examples_per_sec", logs.step, logs.examples_per_sec);
  Write("step/seconds", logs.step, logs.step_seconds);
  Write("step/learning_rate", logs.step, logs.learning_rate);
}

void TensorBoardCallback::OnEpochEnd(const EpochLogs& logs) {
  Write("epoch/loss", logs.epoch, logs.loss);
  Write("epoch/accuracy", logs.epoch, logs.accuracy);
  Write("epoch/examples_per_sec", logs.epoch, logs.examples_per_sec);
  Write("epoch/learning_rate", logs.epoch, logs.learning_rate);
  if (logs.has_validation) {
    Write("epoch/val_loss", logs.epoch, logs.val_loss);
    Write("epoch/val_accuracy", logs.epoch, logs.val_accuracy);
  }
  if (status_.ok()) status_ = writer_->Flush();
}

}  // namespace lockstep
