// lockstep_worker: one model replica training in synchronous steps.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "common/exit_codes.h"
#include "common/flags.h"
#include "common/json_writer.h"
#include "common/lr_schedule.h"
#include "common/malloc_tuning.h"
#include "common/safetensors.h"
#include "common/status_macros.h"
#include "worker/exchange/allreduce/all_reducer.h"
#include "worker/exchange/allreduce_exchanger.h"
#include "worker/data/dataset.h"
#include "worker/device/device_factory.h"
#include "worker/model/models.h"
#include "worker/exchange/ps/ps_client.h"
#include "worker/exchange/ps_exchanger.h"
#include "worker/app/setup.h"
#include "worker/train/trainer.h"
#include "worker/app/worker_flags.h"
#include "worker/app/worker_telemetry.h"

namespace lockstep {
namespace {

absl::Status WriteSummary(const std::string& path, const TrainSummary& s,
                          const WorkerMainOptions& o) {
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
      .Add("wire_dtype", WireDTypeName(o.client.wire_dtype))
      .Add("sync", o.sync)
      .Add("backup_workers", o.trainer.backup_workers)
      .Add("servers", static_cast<int>(o.client.servers.size()));
  return WriteFileAtomically(path, json.ToString());
}

// The model's tensors in the order of its flat weights: parameters, then
// state.
std::vector<TensorInfo> AllTensors(const Model& model) {
  std::vector<TensorInfo> tensors = model.Tensors();
  for (TensorInfo& t : model.StateTensors()) tensors.push_back(std::move(t));
  return tensors;
}

// The first SIGINT or SIGTERM asks the trainer to leave after the current
// step; a second, a while later, ends the process at once. One within
// kSameStop of the first is the same stop delivered twice: a terminal's
// Ctrl-C reaches every process of the launcher's group, and the launcher
// then passes it on as SIGTERM. A plain handler rather than a sigwait
// thread: OpenBLAS starts its threads before main, so the signal may land
// on any thread. The flags are the one piece of global state here, as a
// signal handler needs.
std::atomic<bool> stop_requested{false};
// All-reduce: set when any rank was asked to stop (AllReduceExchanger).
std::atomic<bool> stop_agreed{false};
std::atomic<int64_t> stop_requested_ns{0};  // CLOCK_MONOTONIC.
constexpr int64_t kSameStopNs = int64_t{2} * 1000 * 1000 * 1000;

int64_t MonotonicNs() {  // clock_gettime is async-signal-safe.
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000 * 1000 * 1000 + now.tv_nsec;
}

void OnStopSignal(int) {
  const int64_t now = MonotonicNs();
  int64_t unset = 0;
  stop_requested_ns.compare_exchange_strong(unset, now);
  if (stop_requested.exchange(true)) {
    if (now - stop_requested_ns.load() >= kSameStopNs) {
      std::_Exit(kExitTerminated);
    }
    return;
  }
  static const char kMessage[] =
      "lockstep_worker: stop signal received; leaving after this step\n";
  const ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
}

void HandleSignals() {
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
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

// The exchanger of o->trainer.sync over `client`; in all-reduce mode,
// once every worker has arrived at the rendezvous.
absl::StatusOr<std::unique_ptr<Exchanger>> MakeExchanger(WorkerMainOptions* o,
                                                         PsClient* client) {
  if (o->trainer.sync != SyncMode::kAllReduce) {
    return std::make_unique<PsExchanger>(client, o->trainer.rank);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<AllReducer> reducer,
                   CreateAllReducer(o->allreduce));
  // The trainer stops on the ranks' agreed stop, not on its own signal
  // (which still makes a failed step a stop).
  o->trainer.stop = &stop_agreed;
  o->trainer.stop_signal = &stop_requested;
  return std::make_unique<AllReduceExchanger>(
      std::move(reducer), client, o->trainer.rank, o->trainer.num_workers,
      &stop_requested, &stop_agreed);
}

// The line each rank prints before training; rank 0's describes the job.
void PrintStart(const WorkerMainOptions& o, const Model& model,
                const Dataset& train, const Device& device) {
  if (o.trainer.rank == 0) {
    std::printf(
        "Training %s%s (%lld parameters) on %lld examples with %d "
        "worker(s) x batch %d, %s, %s, device %s\n",
        o.model.name.c_str(),
        o.model.name == "mlp" ? (" " + o.layers).c_str() : "",
        static_cast<long long>(model.NumParameters()),
        static_cast<long long>(train.num_examples), o.trainer.num_workers,
        o.trainer.batch_size, o.trainer.optimizer.name.c_str(), o.sync.c_str(),
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

// After a successful run: the test result, the summary and weights files,
// and the exit code (kExitTerminated after a stop signal).
int Finish(const WorkerMainOptions& o, const TrainSummary& summary,
           const Model& model, const Trainer& trainer) {
  if (summary.test_accuracy >= 0) {
    std::printf(
        "Test accuracy %.4f - test loss %.4f - %.0f examples/s over "
        "%lld steps\n",
        summary.test_accuracy, summary.test_loss, summary.examples_per_sec,
        static_cast<long long>(summary.steps));
  }
  std::fflush(stdout);
  if (!o.summary_json.empty()) {
    if (absl::Status s = WriteSummary(o.summary_json, summary, o); !s.ok()) {
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

int Run(WorkerMainOptions o) {
  auto fail = [&](const absl::Status& s, int code) {
    return Fail(o.trainer.rank, s, code);
  };
  HandleSignals();
  o.trainer.stop = &stop_requested;
  // Health, metrics and trace; NOT_SERVING until training starts.
  absl::StatusOr<std::unique_ptr<WorkerTelemetry>> telemetry =
      WorkerTelemetry::Create(o.telemetry);
  if (!telemetry.ok()) return fail(telemetry.status(), kExitPermanent);
  o.trainer.observer = (*telemetry)->observer();
  Dataset train, test;
  // Data, device and model problems will not go away by retrying.
  if (absl::Status s = LoadData(o.data, o.model, &train, &test); !s.ok()) {
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
  // All-reduce steps push nothing: no thread for them.
  o.client.push_thread =
      o.trainer.sync != SyncMode::kAllReduce &&
      o.push_thread.value_or(!(*device)->BuffersAreHostMemory());
  absl::StatusOr<std::unique_ptr<PsClient>> client = PsClient::Create(o.client);
  if (!client.ok()) return fail(client.status(), kExitPermanent);
  absl::StatusOr<std::unique_ptr<Exchanger>> exchanger =
      MakeExchanger(&o, client->get());
  if (!exchanger.ok()) {
    return fail(exchanger.status(), ExitCodeFor(exchanger.status()));
  }
  PrintStart(o, **model, train, **device);
  // Closed by its deleter.
  absl::StatusOr<StepLog> step_log = OpenStepLog(&o);
  if (!step_log.ok()) return fail(step_log.status(), kExitPermanent);
  Trainer trainer(o.trainer, model->get(), exchanger->get(), &train, &test);
  (*telemetry)->SetTraining(true);
  absl::StatusOr<TrainSummary> summary = trainer.Run();
  (*telemetry)->SetTraining(false);
  // Complete before the summary appears, for readers that wait on it.
  step_log->reset();
  if (!summary.ok()) {
    return fail(summary.status(), ExitCodeFor(summary.status()));
  }
  return Finish(o, *summary, **model, trainer);
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
      {"worker/app/worker_flags.cc", "worker/app/lr_schedule_flags.cc",
       "common/tls_flags.cc"});
  absl::StatusOr<lockstep::WorkerMainOptions> options =
      lockstep::WorkerOptionsFromFlags();
  if (!options.ok()) {
    std::fprintf(stderr, "lockstep_worker: %s\n",
                 std::string(options.status().message()).c_str());
    return lockstep::kExitPermanent;
  }
  return lockstep::Run(*std::move(options));
}
