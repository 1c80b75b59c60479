// lockstep_worker: one model replica training in synchronous steps.
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/env.h"
#include "common/base/exit_codes.h"
#include "common/base/malloc_tuning.h"
#include "common/base/status_macros.h"
#include "common/flags/flags.h"
#include "common/formats/json_writer.h"
#include "common/formats/safetensors.h"
#include "common/optim/lr_schedule.h"
#include "worker/app/setup.h"
#include "worker/app/stop_signals.h"
#include "worker/app/trainer_status.h"
#include "worker/app/worker_flags.h"
#include "worker/app/worker_telemetry.h"
#include "worker/data/dataset.h"
#include "worker/data/validation_split.h"
#include "worker/device/device_factory.h"
#include "worker/exchange/step_session.h"
#include "worker/model/models.h"
#include "worker/train/history.h"
#include "worker/train/progress.h"
#include "worker/train/tensorboard_writer.h"
#include "worker/train/trainer.h"

namespace lockstep {
namespace {

absl::Status WriteSummary(const std::string& path, const TrainSummary& s,
                          const History& history, const WorkerMainOptions& o) {
  JsonObjectWriter json;
  json.Add("test_accuracy", s.test_accuracy)
      .Add("test_loss", s.test_loss)
      .Add("train_loss", s.train_loss)
      .Add("train_accuracy", s.train_accuracy)
      .Add("examples_per_sec", s.examples_per_sec)
      .Add("steps", s.steps)
      .Add("final_version", s.final_version)
      .Add("wall_seconds", s.wall_seconds)
      .Add("rejoins", s.rejoins)
      .Add("workers", o.trainer.num_workers)
      .Add("batch_size", o.trainer.batch_size)
      .Add("optimizer", o.trainer.optimizer.name)
      .Add("final_learning_rate",
           LearningRateAt(o.trainer.optimizer, s.final_version - 1))
      .Add("model", o.model.name)
      .Add("wire_dtype", WireDTypeName(o.session.client.wire_dtype))
      .Add("sync", o.sync)
      .Add("backup_workers", o.trainer.backup_workers)
      .Add("servers", static_cast<int>(o.session.client.servers.size()))
      .AddJson("history", history.ToJson());
  return WriteFileAtomically(path, json.ToString());
}

// The model's tensors in the order of its flat weights: parameters, then
// state.
std::vector<TensorInfo> AllTensors(const Model& model) {
  std::vector<TensorInfo> tensors = model.Tensors();
  for (TensorInfo& t : model.StateTensors()) tensors.push_back(std::move(t));
  return tensors;
}

// Says `s` on stderr as rank `rank`'s; returns `code`.
int Fail(int rank, const absl::Status& s, int code) {
  std::fprintf(stderr, "lockstep_worker %d: %s\n", rank, s.ToString().c_str());
  return code;
}

// --init_weights' file, in the order of the model's flat weights.
absl::StatusOr<std::vector<float>> ReadInitialWeights(const std::string& path,
                                                      const Model& model) {
  ASSIGN_OR_RETURN(std::vector<NamedTensor> file, ReadSafetensors(path));
  return FlattenByName(AllTensors(model), file);
}

// A run that failed after a stop signal (its waiting calls were cancelled
// before it had joined the job, or the rejoin loop was stopped): it leaves
// with `leave` and ends as a stop.
int StoppedWhileWaiting(int rank, const absl::Status& s,
                        const std::function<absl::Status()>& leave) {
  std::fprintf(stderr, "lockstep_worker %d: stopped while waiting: %s\n", rank,
               s.ToString().c_str());
  if (absl::Status left = leave(); !left.ok()) {
    std::fprintf(stderr, "lockstep_worker %d: could not leave the job: %s\n",
                 rank, left.ToString().c_str());
  }
  std::printf("Left the job after a stop signal\n");
  std::fflush(stdout);
  return kExitTerminated;
}

// The line each rank prints before training; rank 0's describes the job.
void PrintStart(const WorkerMainOptions& o, const Model& model,
                const Dataset& train, const Device& device) {
  if (o.trainer.rank == 0) {
    std::printf(
        "Training %s%s (%lld parameters) on %lld examples%s with %d "
        "worker(s) x batch %d, %s, %s, device %s\n",
        o.model.name.c_str(),
        o.model.name == "mlp" ? (" " + o.layers).c_str() : "",
        static_cast<long long>(model.NumParameters()),
        static_cast<long long>(train.num_examples),
        o.trainer.validation == nullptr
            ? ""
            : absl::StrCat(" (validating on ",
                           o.trainer.validation->num_examples, ")")
                  .c_str(),
        o.trainer.num_workers, o.trainer.batch_size,
        o.trainer.optimizer.name.c_str(), o.sync.c_str(),
        device.Name().c_str());
  } else {
    std::printf("Rank %d on device %s\n", o.trainer.rank,
                device.Name().c_str());
  }
  std::fflush(stdout);
}

using StepLog = std::unique_ptr<std::FILE, int (*)(std::FILE*)>;

// Rank 0 only: in the synchronous modes every replica holds the same
// weights, so its batches sample the job's loss. Opens --step_log (none
// when it is not set) and has the trainer write a line per step to it.
absl::StatusOr<StepLog> OpenStepLog(WorkerMainOptions* o) {
  StepLog step_log(nullptr, &std::fclose);
  if (o->step_log.empty() || o->trainer.rank != 0) return step_log;
  step_log.reset(std::fopen(o->step_log.c_str(), "w"));
  if (step_log == nullptr) {
    return absl::InternalError(absl::StrCat("cannot write ", o->step_log));
  }
  std::fputs("step,seconds,loss\n", step_log.get());
  o->trainer.on_step = [file = step_log.get()](int64_t step, double seconds,
                                               double loss) {
    std::fprintf(file, "%lld,%.6f,%.6f\n", static_cast<long long>(step),
                 seconds, loss);
  };
  return step_log;
}

// The training, test and (--validation_split) validation sets.
absl::Status LoadDataSets(WorkerMainOptions* o, Dataset* train, Dataset* test,
                          Dataset* validation) {
  RETURN_IF_ERROR(LoadData(o->data, o->model, train, test));
  if (o->validation_split == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(*validation, SplitValidation(o->validation_split,
                                                "--validation_split", train));
  o->trainer.validation = validation;
  return absl::OkStatus();
}

// What the trainer reports each step and epoch to: the history (for the
// summary), the metrics' gauges and rank 0's TensorBoard event files.
// Lives while the trainer runs; never moved.
struct Reports {
  History history;
  std::unique_ptr<TensorBoardCallback> tensorboard;
  std::unique_ptr<TrainerStatusReporter> trainer_status;  // Rank 0's.
  CallbackList callbacks;
};

absl::Status SetUpReports(WorkerMainOptions* o, WorkerTelemetry* telemetry,
                          Reports* reports) {
  reports->callbacks.Add(&reports->history);
  reports->callbacks.Add(telemetry->callback());
  if (!o->tensorboard_dir.empty() && o->trainer.rank == 0) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<EventFileWriter> writer,
        EventFileWriter::Create(o->tensorboard_dir, o->trainer.env));
    reports->tensorboard =
        std::make_unique<TensorBoardCallback>(std::move(writer));
    reports->callbacks.Add(reports->tensorboard.get());
  }
  if (std::optional<TrainerStatusEndpoint> endpoint =
          TrainerStatusEndpointFromEnvironment();
      endpoint.has_value() && o->trainer.rank == 0) {
    reports->trainer_status = std::make_unique<TrainerStatusReporter>(
        *std::move(endpoint), o->trainer_status_every);
    reports->callbacks.Add(reports->trainer_status.get());
  }
  o->trainer.callback = &reports->callbacks;
  return absl::OkStatus();
}

// The lines a finished run prints: how much it trained and the test result,
// or that the job had finished before this worker joined.
void PrintResult(const WorkerMainOptions& o, const TrainSummary& summary) {
  // A run ends without a step and without a stop only when the job had
  // trained every step before this worker joined: its test figures would
  // say nothing about this run.
  if (summary.steps == 0 && !summary.stopped) {
    std::printf(
        "The job had already finished (version %lld): nothing left to "
        "train\n",
        static_cast<long long>(summary.final_version));
    std::fflush(stdout);
    return;
  }
  if (o.trainer.rank == 0) {
    std::printf("Trained %lld steps - %.0f examples/s\n",
                static_cast<long long>(summary.steps),
                summary.examples_per_sec);
  }
  if (summary.test_accuracy >= 0) {
    std::printf("Test accuracy %.4f - test loss %.4f\n", summary.test_accuracy,
                summary.test_loss);
  }
  std::fflush(stdout);
}

// After a successful run: the test result, the summary and weights files,
// and the exit code (kExitTerminated after a stop signal).
int Finish(const WorkerMainOptions& o, const TrainSummary& summary,
           const Reports& reports, const Model& model, const Trainer& trainer) {
  PrintResult(o, summary);
  if (reports.trainer_status != nullptr && !summary.stopped) {
    reports.trainer_status->Finish(summary.steps, summary.test_loss,
                                   summary.test_accuracy);
  }
  if (reports.tensorboard != nullptr && !reports.tensorboard->status().ok()) {
    return Fail(o.trainer.rank, reports.tensorboard->status(), kExitFailure);
  }
  if (!o.summary_json.empty()) {
    if (absl::Status s =
            WriteSummary(o.summary_json, summary, reports.history, o);
        !s.ok()) {
      return Fail(o.trainer.rank, s, kExitFailure);
    }
  }
  if (!o.dump_weights.empty()) {
    if (absl::Status s =
            DumpWeights(o.dump_weights, AllTensors(model), trainer.weights());
        !s.ok()) {
      return Fail(o.trainer.rank, s, kExitFailure);
    }
  }
  if (summary.stopped) {
    std::printf("Left the job after a stop signal at version %lld\n",
                static_cast<long long>(summary.final_version));
    return kExitTerminated;
  }
  return kExitOk;
}

// Joins the job through `session` and trains, then finishes (Finish). A
// run that a stop signal cut short while it waited ends as a stop.
int TrainOver(WorkerMainOptions* options, StepSession* session,
              StopSignals* stop, Model* model, const Device& device,
              const Dataset& train, const Dataset& test,
              WorkerTelemetry* telemetry) {
  WorkerMainOptions& o = *options;
  auto fail = [&](const absl::Status& s, int code) {
    return Fail(o.trainer.rank, s, code);
  };
  // However it ends, the watchdog no longer uses the session after.
  stop->SetLastLeave([session] { return session->LeaveFromAnyThread(); });
  absl::Cleanup run_done = [stop] { stop->Done(); };
  const std::function<absl::Status()> leave = [session] {
    return session->LeaveFromAnyThread();
  };
  PrintStart(o, *model, train, device);
  // Closed by its deleter.
  absl::StatusOr<StepLog> step_log = OpenStepLog(&o);
  if (!step_log.ok()) return fail(step_log.status(), kExitPermanent);
  Reports reports;
  if (absl::Status s = SetUpReports(&o, telemetry, &reports); !s.ok()) {
    return fail(s, kExitPermanent);
  }
  Trainer trainer(o.trainer, model, session, &train, &test);
  telemetry->SetTraining(true);
  absl::StatusOr<TrainSummary> summary = trainer.Run();
  telemetry->SetTraining(false);
  // Complete before the summary appears, for readers that wait on it.
  step_log->reset();
  if (!summary.ok() && stop->requested()->load()) {
    return StoppedWhileWaiting(o.trainer.rank, summary.status(), leave);
  }
  std::move(run_done).Invoke();
  if (!summary.ok()) {
    const int code = ExitCodeFor(summary.status());
    if (code != kExitRetryable) {
      // Retrying will not help: the servers end the job as failed rather
      // than wait for this rank (or report the job done once the others
      // leave). A retryable failure leaves nothing: a restart replaces it.
      if (absl::Status left = session->Leave(
              LeaveNote{LeaveReason::kFailed, summary.status().ToString()});
          !left.ok()) {
        std::fprintf(stderr,
                     "lockstep_worker %d: could not leave the job: %s\n",
                     o.trainer.rank, left.ToString().c_str());
      }
    }
    return fail(summary.status(), code);
  }
  const int code = Finish(o, *summary, reports, *model, trainer);
  if (summary->left.ok() || code != kExitOk) return code;
  // Every step trained and the outputs are written; only the end of the
  // job did not reach the servers (or the all-reduce coordinator).
  std::fprintf(stderr,
               "lockstep_worker %d: trained every step and wrote its outputs, "
               "but could not leave the job\n",
               o.trainer.rank);
  return fail(summary->left, ExitCodeFor(summary->left));
}

int Run(WorkerMainOptions o) {
  auto fail = [&](const absl::Status& s, int code) {
    return Fail(o.trainer.rank, s, code);
  };
  // The files written at the end, checked before the run (as --trace,
  // --tensorboard_dir and the step log are, by opening them): a job must
  // not train for hours to lose its only output. Nothing is created here.
  for (const auto& [flag, path] :
       {std::pair{"--summary_json", o.summary_json},
        std::pair{"--dump_weights", o.dump_weights}}) {
    if (path.empty()) continue;
    if (absl::Status s = CheckCanWriteFile(flag, path, o.trainer.env);
        !s.ok()) {
      return fail(s, kExitPermanent);
    }
  }
  StopSignals* const stop = StopSignals::Install(o.trainer.rank);
  o.session.stop_requested = stop->requested();
  o.session.client.cancel = stop->token();
  o.session.env = o.trainer.env;
  // Health, metrics and trace; NOT_SERVING until training starts.
  absl::StatusOr<std::unique_ptr<WorkerTelemetry>> telemetry =
      WorkerTelemetry::Create(o.telemetry);
  if (!telemetry.ok()) return fail(telemetry.status(), kExitPermanent);
  o.trainer.observer = (*telemetry)->observer();
  Dataset train, test, validation;
  // Data, device and model problems will not go away by retrying.
  if (absl::Status s = LoadDataSets(&o, &train, &test, &validation); !s.ok()) {
    return fail(s, kExitPermanent);
  }
  absl::StatusOr<std::unique_ptr<Device>> device = CreateDevice(o.device);
  if (!device.ok()) return fail(device.status(), kExitPermanent);
  absl::StatusOr<std::unique_ptr<Model>> model =
      CreateModel(o.model, o.trainer.batch_size, device->get());
  if (!model.ok()) return fail(model.status(), kExitPermanent);
  if (!o.init_weights.empty()) {
    absl::StatusOr<std::vector<float>> initial =
        ReadInitialWeights(o.init_weights, **model);
    if (!initial.ok()) return fail(initial.status(), kExitPermanent);
    o.trainer.initial_weights = *std::move(initial);
  }
  o.session.client.push_thread =
      o.push_thread.value_or(!(*device)->BuffersAreHostMemory());
  absl::StatusOr<std::unique_ptr<StepSession>> session =
      StepSession::Create(o.session);
  if (!session.ok()) return fail(session.status(), kExitPermanent);
  return TrainOver(&o, session->get(), stop, model->get(), **device, train,
                   test, telemetry->get());
}

}  // namespace
}  // namespace lockstep

int main(int argc, char** argv) {
  lockstep::TuneMallocForSteps();
  absl::SetProgramUsageMessage(
      "Lockstep worker: trains one replica of a model (MLP, CNN, ResNet) on "
      "its shard of the data, exchanging gradients every step through the "
      "parameter servers or by all-reduce.\n"
      "Usage: lockstep_worker --servers=HOST:PORT --workers=N --rank=R "
      "[--layers=784,128,10 --optimizer=adam --batch_size=64 --epochs=5]\n"
      "Exit codes: 0 done, 2 bad flags, data or model (permanent), 75 a lost "
      "server or timeout (retryable), 143 left after SIGTERM, 1 other.");
  lockstep::ParseFlags(
      argc, argv,
      {"worker/app/worker_flags.cc", "worker/app/model_flags.cc",
       "worker/app/device_output_flags.cc", "worker/app/exchange_flags.cc",
       "worker/app/optimizer_flags.cc", "common/security/tls_flags.cc"});
  absl::StatusOr<lockstep::WorkerMainOptions> options =
      lockstep::WorkerOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "lockstep_worker: %s\n",
                 std::string(options.status().message()).c_str());
    return lockstep::kExitPermanent;
  }
  if (lockstep::ValidateOnly()) return lockstep::kExitOk;
  return lockstep::Run(*std::move(options));
}
