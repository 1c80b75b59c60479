// lockstep_worker's command line: the flags (defined, with their help text,
// in worker_flags.cc, the job's, and the files worker_flag_groups.h names)
// and their translation, with TF_CONFIG, into the options of the trainer,
// the client, the device and the rest.
#ifndef LOCKSTEP_WORKER_APP_WORKER_FLAGS_H_
#define LOCKSTEP_WORKER_APP_WORKER_FLAGS_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "worker/app/setup.h"
#include "worker/app/worker_telemetry.h"
#include "worker/device/device_factory.h"
#include "worker/exchange/step_session.h"
#include "worker/model/models.h"
#include "worker/train/trainer.h"

namespace lockstep {

struct WorkerMainOptions {
  TrainerOptions trainer;
  // How the worker's steps meet the others': the servers' client, the
  // all-reduce backend, the elastic group (--min_workers), the rejoins.
  StepSessionOptions session;
  DeviceOptions device;
  ModelSpec model;
  DataOptions data;
  std::string summary_json;
  std::string dump_weights;
  std::string init_weights;  // A safetensors file for version 0.
  WorkerTelemetryOptions telemetry;
  std::string step_log;
  std::string tensorboard_dir;  // Rank 0's event files; empty: none.
  // Rank 0's reports to a TrainJob's status endpoint (trainer_status.h):
  // at most this often, besides each epoch's end and the job's.
  absl::Duration trainer_status_every = absl::Seconds(30);
  double validation_split = 0;  // 0: no validation.
  std::string sync;             // --sync, for the log line and the summary.
  std::string layers;           // --layers, for the log line.
  // --push_thread: on, off, or nullopt (auto: on where the device's
  // buffers are not host memory, i.e. on a GPU).
  std::optional<bool> push_thread;
};

// The options the flags (already parsed by ParseFlags, common/flags/flags.h)
// and TF_CONFIG ask for; INVALID_ARGUMENT naming the flag when one is bad.
absl::StatusOr<WorkerMainOptions> WorkerOptionsFromFlags();

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_WORKER_FLAGS_H_
