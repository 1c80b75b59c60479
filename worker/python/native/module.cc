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
  m.attr("DEFAULT_LOCAL_STEPS") = kDefaultLocalSteps;
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
