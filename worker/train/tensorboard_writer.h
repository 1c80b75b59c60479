// TensorBoard event files, written without TensorFlow: the TFRecord
// framing (uint64 length, masked CRC-32C of the length, the data, masked
// CRC-32C of the data) around Event protos encoded by hand with
// TensorFlow's field numbers (event.proto: wall_time 1, step 2,
// file_version 3, summary 5; summary.proto: Summary.value 1, Value.tag 1,
// Value.simple_value 2). A file is DIR/events.out.tfevents.<unix seconds>.
// <host> and starts with the event file_version "brain.Event:2".
//
// TensorBoardCallback writes the scalars of --tensorboard_dir (tags listed
// in docs/operations.md, "TensorBoard"). Not thread-safe.
#ifndef LOCKSTEP_WORKER_TRAIN_TENSORBOARD_WRITER_H_
#define LOCKSTEP_WORKER_TRAIN_TENSORBOARD_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/env.h"
#include "worker/train/training_callback.h"

namespace lockstep {

// CRC-32C (Castagnoli), and TFRecord's masked form of it.
uint32_t Crc32c(absl::string_view data);
uint32_t MaskedCrc32c(absl::string_view data);

// The serialized Event protos, and one TFRecord around `data`.
std::string EncodeFileVersionEvent(double wall_time);
std::string EncodeScalarEvent(double wall_time, int64_t step,
                              absl::string_view tag, float value);
std::string EncodeRecord(absl::string_view data);

class EventFileWriter final {
 public:
  // Makes `dir` (and its parents) and a new event file in it, through
  // `env` (not owned) as every file operation after. UNAVAILABLE (or
  // RESOURCE_EXHAUSTED for a full disk) when either cannot be made.
  static absl::StatusOr<std::unique_ptr<EventFileWriter>> Create(
      const std::string& dir, Env* env);
  ~EventFileWriter();
  EventFileWriter(const EventFileWriter&) = delete;
  EventFileWriter& operator=(const EventFileWriter&) = delete;

  // Appends a scalar, stamped with env's time; written out at most every
  // few seconds, and by Flush (write(2), no fsync: a reader sees it).
  absl::Status WriteScalar(absl::string_view tag, int64_t step, float value);
  absl::Status Flush();

  const std::string& path() const { return path_; }

 private:
  EventFileWriter(std::string path, std::unique_ptr<WritableFile> file,
                  Env* env);
  void Append(const std::string& event);

  const std::string path_;
  const std::unique_ptr<WritableFile> file_;
  Env* const env_;       // Not owned.
  std::string pending_;  // Records not written out yet.
  absl::Time last_flush_;
};

// Writes step/{loss,accuracy,examples_per_sec,seconds,learning_rate} at
// every step (its global step count) and epoch/{loss,accuracy,
// examples_per_sec,learning_rate} and, when validated, epoch/{val_loss,
// val_accuracy} at every epoch's end (its number, from 1), flushing then.
class TensorBoardCallback final : public TrainingCallback {
 public:
  explicit TensorBoardCallback(std::unique_ptr<EventFileWriter> writer);

  void OnStepEnd(const StepLogs& logs) override;
  void OnEpochEnd(const EpochLogs& logs) override;

  // The first write that failed (later writes are skipped), else OK.
  const absl::Status& status() const { return status_; }

 private:
  void Write(absl::string_view tag, int64_t step, double value);

  std::unique_ptr<EventFileWriter> writer_;
  absl::Status status_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_TENSORBOARD_WRITER_H_
