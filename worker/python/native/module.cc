// lockstep._native: the C++ worker's client, sampler, TF_CONFIG reader, data
// readers and safetensors codec (files.cc) for Python workers. Bindings only
// (client.h, conversions.h): every decision is the C++ classes'
// (step_session.h, sharded_sampler.h), so a Python worker speaks
// lockstep_worker's protocol. Names and codes (sync modes, optimizers, exit
// codes) come from their C++ definitions; absl::Status becomes LockstepError
// here alone.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/exit_codes.h"
#include "common/formats/tf_config.h"
#include "common/model/model_signature.h"
#include "common/optim/lr_schedule.h"
#include "worker/app/trainer_status.h"
#include "worker/data/sharded_sampler.h"
#include "worker/exchange/semi_sync_step_session.h"
#include "worker/python/native/client.h"
#include "worker/python/native/conversions.h"
#include "worker/python/native/files.h"

namespace py = pybind11;

namespace lockstep {
namespace {

py::object ToArray(const std::vector<int64_t>& values) {
  return NumpyArray(values.data(), values.size() * sizeof(int64_t), "int64",
                    {static_cast<int64_t>(values.size())});
}

std::unique_ptr<Client> NewClient(std::vector<std::string> servers, int rank,
                                  std::string wire_dtype, int push_window,
                                  bool push_thread, double connect_timeout_s,
                                  double rpc_timeout_s, double step_timeout_s,
                                  double rejoin_timeout_s, uint64_t seed,
                                  std::string tls_ca, std::string tls_cert,
                                  std::string tls_key,
                                  std::string tls_server_name,
                                  std::string token_file, bool insecure,
                                  std::vector<std::string> standby_servers,
                                  std::string rounds, int local_steps,
                                  std::optional<double> outer_lr,
                                  std::optional<double> outer_momentum) {
  ClientOptions o;
  o.servers = std::move(servers);
  o.standby_servers = std::move(standby_servers);
  o.rank = rank;
  o.wire_dtype = std::move(wire_dtype);
  o.push_window = push_window;
  o.push_thread = push_thread;
  o.connect_timeout_s = connect_timeout_s;
  o.rpc_timeout_s = rpc_timeout_s;
  o.step_timeout_s = step_timeout_s;
  o.rejoin_timeout_s = rejoin_timeout_s;
  o.seed = seed;
  // Errors name the keyword arguments.
  o.tls.names.ca_file = "tls_ca";
  o.tls.names.cert_file = "tls_cert";
  o.tls.names.key_file = "tls_key";
  o.tls.names.token_file = "token_file";
  o.tls.ca_file = std::move(tls_ca);
  o.tls.cert_file = std::move(tls_cert);
  o.tls.key_file = std::move(tls_key);
  o.tls.server_name = std::move(tls_server_name);
  o.tls.token_file = std::move(token_file);
  o.tls.insecure = insecure;
  o.rounds = std::move(rounds);
  o.local_steps = local_steps;
  o.outer_lr = outer_lr;
  o.outer_momentum = outer_momentum;
  return std::make_unique<Client>(std::move(o));
}

// A learning-rate schedule from its dict, checked: the keys are
// lockstep_worker's --lr_* flags without "lr_" ("schedule" is the kind, the
// others LrSchedule's fields); absent ones keep their defaults.
LrSchedule ScheduleFromDict(const py::dict& d) {
  LrSchedule s;
  for (auto item : d) {
    const std::string key = py::cast<std::string>(item.first);
    const py::handle v = item.second;
    if (key == "schedule") {
      s.kind = py::cast<std::string>(v);
    } else if (key == "decay_steps") {
      s.decay_steps = py::cast<int64_t>(v);
    } else if (key == "decay_rate") {
      s.decay_rate = py::cast<double>(v);
    } else if (key == "staircase") {
      s.staircase = py::cast<bool>(v);
    } else if (key == "boundaries") {
      s.boundaries = py::cast<std::vector<int64_t>>(v);
    } else if (key == "values") {
      s.values = py::cast<std::vector<double>>(v);
    } else if (key == "alpha") {
      s.alpha = py::cast<double>(v);
    } else if (key == "warmup_steps") {
      s.warmup_steps = py::cast<int64_t>(v);
    } else if (key == "warmup_from") {
      s.warmup_from = py::cast<double>(v);
    } else {
      ThrowIfError(absl::InvalidArgumentError("lr_schedule has no setting \"" +
                                              key + "\""));
    }
  }
  ThrowIfError(ValidateLrSchedule(s));
  return s;
}

StepOutcome JoinJob(Client& c, NamedShapes tensors, NamedShapes state,
                    std::string optimizer, double learning_rate,
                    double momentum, bool nesterov, double beta_1,
                    double beta_2, double epsilon, double weight_decay,
                    int64_t chunk_bytes, int num_workers, int num_shards,
                    std::string sync, int backup_workers, int staleness,
                    int64_t total_steps, const py::buffer& weights,
                    const py::buffer& gradient, double timeout_s,
                    const py::dict& lr_schedule) {
  JoinRequest r;
  r.tensors = std::move(tensors);
  r.state_tensors = std::move(state);
  r.optimizer.name = std::move(optimizer);
  r.optimizer.learning_rate = learning_rate;
  r.optimizer.momentum = momentum;
  r.optimizer.nesterov = nesterov;
  r.optimizer.beta_1 = beta_1;
  r.optimizer.beta_2 = beta_2;
  r.optimizer.epsilon = epsilon;
  r.optimizer.weight_decay = weight_decay;
  r.optimizer.schedule = ScheduleFromDict(lr_schedule);
  r.chunk_bytes = chunk_bytes;
  r.num_workers = num_workers;
  r.num_shards = num_shards;
  r.sync = std::move(sync);
  r.backup_workers = backup_workers;
  r.staleness = staleness;
  r.total_steps = total_steps;
  return c.Join(r, weights, gradient, timeout_s);
}

// LockstepError's arguments for `s`: the code as a number and a name, the
// message, whether it is retryable, its exit code (common/base/exit_codes.h).
py::tuple StatusFields(const absl::Status& s) {
  return py::make_tuple(static_cast<int>(s.code()), CodeName(s.code()),
                        std::string(s.message()), IsRetryable(s),
                        ExitCodeFor(s));
}

// absl::Status errors become lockstep.errors.LockstepError.
void TranslateErrors() {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      py::object cls =
          py::module_::import("lockstep.errors").attr("LockstepError");
      py::object error = cls(*StatusFields(e.status));
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });
}

// The step session's client (client.h).
void BindClient(py::module_& m) {
  py::class_<StepOutcome>(m, "StepOutcome",
                          "Where a step or a join left this worker.")
      .def_readonly("applied", &StepOutcome::applied,
                    "This worker's gradient went into `version`.")
      .def_readonly("version", &StepOutcome::version,
                    "The version of the weights now in the buffer.")
      .def_readonly("next_step", &StepOutcome::next_step,
                    "The step this worker computes next.")
      .def_readonly("rejoined", &StepOutcome::rejoined,
                    "The worker registered again after a retryable "
                    "failure; the step's gradient was dropped.")
      .def_readonly("stopped", &StepOutcome::stopped,
                    "The step failed after a stop signal.");
  py::class_<Client>(m, "Client")
      .def(py::init(&NewClient), py::arg("servers"), py::arg("rank"),
           py::arg("wire_dtype") = "fp32",
           py::arg("push_window") = kAutoPushWindow,
           py::arg("push_thread") = false, py::arg("connect_timeout_s") = 60.0,
           py::arg("rpc_timeout_s") = 60.0, py::arg("step_timeout_s") = 300.0,
           py::arg("rejoin_timeout_s") = 300.0, py::arg("seed") = 42,
           py::arg("tls_ca") = "", py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("tls_server_name") = "",
           py::arg("token_file") = "", py::arg("insecure") = false,
           py::arg("standby_servers") = std::vector<std::string>(),
           py::arg("rounds") = "", py::arg("local_steps") = 0,
           py::arg("outer_lr") = py::none(),
           py::arg("outer_momentum") = py::none())
      .def("join", &JoinJob, py::arg("tensors"), py::arg("state_tensors"),
           py::arg("optimizer"), py::arg("learning_rate"), py::arg("momentum"),
           py::arg("nesterov"), py::arg("beta_1"), py::arg("beta_2"),
           py::arg("epsilon"), py::arg("weight_decay"), py::arg("chunk_bytes"),
           py::arg("num_workers"), py::arg("num_shards"), py::arg("sync"),
           py::arg("backup_workers"), py::arg("staleness"),
           py::arg("total_steps"), py::arg("weights"), py::arg("gradient"),
           py::arg("timeout_s"), py::arg("lr_schedule") = py::dict(),
           "Registers (rank 0's weights buffer defines version 0 when the "
           "job has none) and pulls the version to start from into weights; "
           "both buffers are held from then on. Returns a StepOutcome.")
      .def("begin_step", &Client::BeginStep, "Returns the step to compute.")
      .def("gradient_ready", &Client::GradientReady, py::arg("begin"),
           py::arg("end"))
      .def("finish_step", &Client::FinishStep,
           "Pushes the rest and waits for the next version (registering "
           "again after a retryable failure); returns a StepOutcome.")
      .def("abandon_step", &Client::AbandonStep,
           "Ends a step without pushing the rest; the weights are then of "
           "one version.")
      .def("average", &Client::Average, py::arg("name"), py::arg("values"),
           py::arg("timeout_s"),
           "The element-wise mean of values over the workers (metrics); "
           "every worker makes the same calls, name and length alike.")
      .def("leave", &Client::Leave, py::arg("reason") = "finished",
           py::arg("detail") = "")
      .def("timings",
           [](const Client& c) {
             const StepTimings t = c.timings();
             py::dict d;
             d["steps"] = t.steps;
             d["encode_seconds"] = t.encode_seconds;
             d["send_seconds"] = t.send_seconds;
             d["wait_seconds"] = t.wait_seconds;
             d["decode_seconds"] = t.decode_seconds;
             return d;
           })
      .def_property_readonly("push_window", &Client::push_window)
      .def_property_readonly("in_step", &Client::in_step)
      .def_property_readonly("rejoins", &Client::rejoins);
}

// The data sharding of lockstep_worker (worker/data/sharded_sampler.h).
void BindSampler(py::module_& m) {
  py::class_<ShardedSampler>(m, "ShardedSampler")
      .def(py::init([](int64_t num_examples, int num_workers, int rank,
                       int batch_size, uint64_t seed) {
             return ValueOrThrow(ShardedSampler::Create(
                 num_examples, num_workers, rank, batch_size, seed));
           }),
           py::arg("num_examples"), py::arg("num_workers"), py::arg("rank"),
           py::arg("batch_size"), py::arg("seed"))
      .def("steps_per_epoch", &ShardedSampler::StepsPerEpoch)
      .def(
          "batch_indices",
          [](ShardedSampler& s, int64_t step) {
            if (step < 0) throw py::value_error("step must be >= 0");
            return ToArray(s.BatchIndices(step));
          },
          py::arg("step"))
      .def(
          "epoch_permutation",
          [](const ShardedSampler& s, int64_t epoch) {
            return ToArray(s.EpochPermutation(epoch));
          },
          py::arg("epoch"));
}

// TF_CONFIG and the optimizers' defaults.
void BindConfig(py::module_& m) {
  m.def("parse_tf_config", [](const std::string& text) {
    const TfConfig config = ValueOrThrow(ParseTfConfig(text));
    py::dict d;
    d["ps"] = config.PsAddresses();
    d["num_workers"] = config.NumWorkers();
    d["task_type"] = config.task_type;
    d["task_index"] = config.task_index;
    absl::StatusOr<int> rank = config.WorkerRank();
    d["rank"] = rank.ok() ? py::cast(*rank) : py::none();
    return d;
  });

  m.def("optimizer_defaults", [](const std::string& name) {
    const OptimizerConfig c = OptimizerConfig::Defaults(name);
    py::dict d;
    d["learning_rate"] = c.learning_rate;
    d["momentum"] = c.momentum;
    d["nesterov"] = c.nesterov;
    d["beta_1"] = c.beta_1;
    d["beta_2"] = c.beta_2;
    d["epsilon"] = c.epsilon;
    d["weight_decay"] = c.weight_decay;
    return d;
  });

  m.def(
      "learning_rate_at",
      [](double learning_rate, const py::dict& lr_schedule, int64_t step) {
        OptimizerConfig c;
        c.learning_rate = learning_rate;
        c.schedule = ScheduleFromDict(lr_schedule);
        return LearningRateAt(c, step);
      },
      py::arg("learning_rate"), py::arg("lr_schedule"), py::arg("step"),
      "The rate of `step` under the schedule (common/optim/lr_schedule.h); "
      "LockstepError for a schedule the servers would refuse.");
}

// Rank 0's progress in a Kubeflow TrainJob's status: lockstep_worker's
// reporter (worker/app/trainer_status.h), fed by lockstep.TrainerStatus.
void BindTrainerStatus(py::module_& m) {
  py::class_<TrainerStatusReporter>(m, "TrainerStatusReporter")
      .def(
          "step",
          [](TrainerStatusReporter& r, int64_t step, int64_t total_steps,
             int epoch, int epochs, double loss, double accuracy,
             double examples_per_sec) {
            StepLogs logs;
            logs.step = step;
            logs.total_steps = total_steps;
            logs.epoch = epoch;
            logs.epochs = epochs;
            logs.loss = loss;
            logs.accuracy = accuracy;
            logs.examples_per_sec = examples_per_sec;
            r.OnStepEnd(logs);
          },
          py::arg("step"), py::arg("total_steps"), py::arg("epoch"),
          py::arg("epochs"), py::arg("loss"), py::arg("accuracy"),
          py::arg("examples_per_sec"))
      .def(
          "epoch_end",
          [](TrainerStatusReporter& r, int epoch, int64_t step,
             std::optional<double> val_loss,
             std::optional<double> val_accuracy) {
            EpochLogs logs;
            logs.epoch = epoch;
            logs.step = step;
            logs.has_validation = val_loss.has_value();
            logs.val_loss = val_loss.value_or(0);
            logs.val_accuracy = val_accuracy.value_or(0);
            r.OnEpochEnd(logs);
          },
          py::arg("epoch"), py::arg("step"), py::arg("val_loss"),
          py::arg("val_accuracy"))
      .def(
          "finish",
          [](TrainerStatusReporter& r, int64_t steps, double test_loss,
             double test_accuracy) {
            py::gil_scoped_release release;  // The post waits on the wire.
            r.Finish(steps, test_loss, test_accuracy);
          },
          py::arg("steps"), py::arg("test_loss"), py::arg("test_accuracy"));
  m.def(
      "trainer_status_reporter",
      [](double every_s) -> std::unique_ptr<TrainerStatusReporter> {
        std::optional<TrainerStatusEndpoint> endpoint =
            TrainerStatusEndpointFromEnvironment();
        if (!endpoint.has_value()) return nullptr;
        return std::make_unique<TrainerStatusReporter>(*std::move(endpoint),
                                                       absl::Seconds(every_s));
      },
      py::arg("every_s"),
      "A reporter to the endpoint Kubeflow Trainer gives the pod "
      "(KUBEFLOW_TRAINER_STATUS_SERVER_*), or None where none is given.");
}

// The names and codes of common/: sync modes, optimizers, status and
// exit codes.
void BindExitCodes(py::module_& m) {
  m.def(
      "status_fields",
      [](const std::string& code_name, const std::string& message) {
        for (int code = 1; code <= 16; ++code) {
          const auto c = static_cast<absl::StatusCode>(code);
          if (CodeName(c) == code_name) {
            return StatusFields(absl::Status(c, message));
          }
        }
        throw py::value_error("no status code named " + code_name);
      },
      py::arg("code_name"), py::arg("message"),
      "LockstepError's arguments for a failure of that status code (e.g. "
      "\"INVALID_ARGUMENT\"): (code, code_name, message, retryable, "
      "exit_code), as the C++ worker decides them.");
  m.attr("SYNC_MODES") = py::tuple(py::cast(SignatureSyncModeNames()));
  // LocalSGD and DiLoCo: synchronous rounds of local steps.
  m.attr("ROUNDS_MODES") = py::tuple(py::cast(RoundsModeNames()));
  m.attr("OPTIMIZERS") = py::tuple(py::cast(OptimizerConfig::Names()));
  m.attr("AVERAGE") = OptimizerConfig::kAverage;  // The summation mode's.
  m.attr("EXIT_FAILURE") = kExitFailure;
  m.attr("EXIT_PERMANENT") = kExitPermanent;
  m.attr("EXIT_RETRYABLE") = kExitRetryable;
  m.attr("EXIT_TERMINATED") = kExitTerminated;
}

}  // namespace
}  // namespace lockstep

PYBIND11_MODULE(_native, m) {
  m.doc() =
      "Lockstep's C++ worker client for Python (see lockstep/__init__.py)";
  m.attr("__version__") = LOCKSTEP_VERSION;  // CMake's project version.
  lockstep::TranslateErrors();
  lockstep::BindClient(m);
  lockstep::BindSampler(m);
  lockstep::BindConfig(m);
  lockstep::BindFiles(m);
  lockstep::BindExitCodes(m);
  lockstep::BindTrainerStatus(m);
}
