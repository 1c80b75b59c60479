// lockstep._native: the C++ worker's parameter-server client, sampler,
// TF_CONFIG reader and safetensors codec for Python workers. A thin
// adapter: every decision is the C++ classes' (worker/ps_client.h,
// worker/ps_exchanger.h, worker/sharded_sampler.h), so a Python worker
// speaks exactly the protocol lockstep_worker does. absl::Status becomes
// lockstep.errors.LockstepError here and nowhere else. Blocking calls
// release the GIL; arrays cross as buffers, without a copy.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cctype>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/exit_codes.h"
#include "common/model_signature.h"
#include "common/safetensors.h"
#include "common/tf_config.h"
#include "common/wire_codec.h"
#include "worker/cifar_reader.h"
#include "worker/dataset.h"
#include "worker/ps_client.h"
#include "worker/ps_exchanger.h"
#include "worker/rejoiner.h"
#include "worker/sharded_sampler.h"

namespace py = pybind11;

namespace lockstep {
namespace {

// A failed absl::Status on its way to Python (see the translator below).
struct StatusError {
  absl::Status status;
};

void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status};
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// gRPC's and absl's shared code names ("UNAVAILABLE").
std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) {
    c = c == ' ' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

// A float32 buffer viewed as a flat span: C-contiguous, any shape.
struct FloatBuffer {
  std::unique_ptr<py::buffer_info> info;  // Holds the view.
  absl::Span<float> span;
};

FloatBuffer RequestFloats(const py::buffer& buffer, bool writable,
                          const char* what) {
  FloatBuffer out;
  out.info = std::make_unique<py::buffer_info>(buffer.request(writable));
  const py::buffer_info& info = *out.info;
  if (info.itemsize != 4 || (info.format != "f" && info.format != "<f" &&
                             info.format != "=f")) {
    throw py::type_error(absl::StrCat(what, ": needs float32 values, got format '",
                                      info.format, "'"));
  }
  int64_t expect = info.itemsize;
  for (int64_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) {
      throw py::value_error(absl::StrCat(what, ": needs a C-contiguous array"));
    }
    expect *= info.shape[d];
  }
  out.span = absl::MakeSpan(static_cast<float*>(info.ptr),
                            static_cast<size_t>(info.size));
  return out;
}

std::vector<TensorInfo> Tensors(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& list) {
  std::vector<TensorInfo> out;
  for (const auto& [name, shape] : list) out.push_back({name, shape});
  return out;
}

absl::StatusOr<SyncPolicy::Mode> ParseSync(const std::string& mode) {
  if (mode == "sync") return SyncPolicy::Mode::kSync;
  if (mode == "async") return SyncPolicy::Mode::kAsync;
  if (mode == "ssp") return SyncPolicy::Mode::kSsp;
  return absl::InvalidArgumentError(
      absl::StrCat("sync must be sync, async or ssp, got \"", mode, "\""));
}

absl::Duration Seconds(double s) {
  return s > 0 ? absl::Seconds(s) : absl::InfiniteDuration();
}

// One worker's membership of a job: a PsClient and the PsExchanger's join
// rules. Externally synchronized (Python's one training thread); the
// buffers of a step are held from BeginStep until it ends.
class Client final {
 public:
  Client(std::vector<std::string> servers, int rank,
         const std::string& wire_dtype, int push_window, bool push_thread,
         double connect_timeout_s, double rpc_timeout_s, double step_timeout_s,
         double rejoin_timeout_s, uint64_t seed, TlsOptions tls)
      : rank_(rank),
        rejoiner_(absl::StrCat("lockstep worker ", rank), seed, rank,
                  absl::Seconds(rejoin_timeout_s), "rejoin_timeout_s") {
    PsClientOptions options;
    options.servers = std::move(servers);
    options.wire_dtype = ValueOrThrow(ParseWireDType(wire_dtype));
    options.max_pushes_in_flight = push_window;
    options.push_thread = push_thread;
    options.connect_timeout = absl::Seconds(connect_timeout_s);
    options.rpc_timeout = absl::Seconds(rpc_timeout_s);
    options.step_timeout = absl::Seconds(step_timeout_s);
    options.tls = std::move(tls);  // Never the flags: this is a library.
    client_ = ValueOrThrow(PsClient::Create(options));
    exchanger_ = std::make_unique<PsExchanger>(client_.get(), rank_);
  }

  ~Client() {
    // An unfinished step's pushes reference the buffers: end it first.
    if (in_step_) {
      py::gil_scoped_release release;
      exchanger_->AbandonStep();
    }
  }

  int64_t Join(const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
               const std::vector<std::pair<std::string, std::vector<int64_t>>>& state,
               const std::string& optimizer, double learning_rate,
               double momentum, bool nesterov, double beta_1, double beta_2,
               double epsilon, double weight_decay, int64_t chunk_bytes,
               int num_workers, int num_shards, const std::string& sync,
               int backup_workers, int staleness, int64_t total_steps,
               const py::buffer& weights, double timeout_s) {
    EnsureNoStep("join");
    ModelSignature signature;
    signature.tensors = Tensors(tensors);
    signature.state_tensors = Tensors(state);
    signature.optimizer.name = optimizer;
    signature.optimizer.learning_rate = learning_rate;
    signature.optimizer.momentum = momentum;
    signature.optimizer.nesterov = nesterov;
    signature.optimizer.beta_1 = beta_1;
    signature.optimizer.beta_2 = beta_2;
    signature.optimizer.epsilon = epsilon;
    signature.optimizer.weight_decay = weight_decay;
    signature.chunk_bytes = chunk_bytes;
    signature.num_workers = num_workers;
    signature.num_shards = num_shards;
    signature.sync.mode = ValueOrThrow(ParseSync(sync));
    signature.sync.backup_workers = backup_workers;
    signature.sync.staleness = staleness;
    signature.total_steps = total_steps;
    FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
    const int64_t expect =
        signature.NumParameters() + signature.NumStateElements();
    if (static_cast<int64_t>(w.span.size()) != expect) {
      throw py::value_error(absl::StrCat("weights: the signature has ", expect,
                                         " values, the buffer ", w.span.size()));
    }
    absl::StatusOr<int64_t> version;
    {
      py::gil_scoped_release release;
      version = JoinOnce(signature, w.span, Seconds(timeout_s));
    }
    const int64_t joined = ValueOrThrow(std::move(version));
    signature_ = std::move(signature);
    rejoiner_.StepSucceeded();  // The rejoin deadline counts from here.
    return joined;
  }

  void BeginStep(int64_t step, const py::buffer& gradient,
                 const py::buffer& weights) {
    EnsureNoStep("begin_step");
    FloatBuffer g = RequestFloats(gradient, /*writable=*/false, "gradient");
    FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
    ThrowIfError(exchanger_->BeginStep(step, g.span, w.span));
    gradient_ = std::move(g);
    weights_ = std::move(w);
    in_step_ = true;
  }

  void GradientReady(int64_t begin, int64_t end) {
    if (!in_step_) throw py::value_error("gradient_ready: no step begun");
    py::gil_scoped_release release;
    exchanger_->GradientReady(begin, end);
  }

  // The version the step was answered with, and whether a retryable
  // failure made this worker register again (the weights buffer then holds
  // the version to go on from, and the step's gradient was dropped).
  std::pair<int64_t, bool> FinishStep() {
    if (!in_step_) throw py::value_error("finish_step: no step begun");
    absl::StatusOr<int64_t> version;
    bool rejoined = false;
    {
      py::gil_scoped_release release;
      version = exchanger_->FinishStep();
      if (version.ok()) {
        rejoiner_.StepSucceeded();
      } else if (IsRetryable(version.status())) {
        // As lockstep_worker does: register again and go on from the
        // version the servers have; the data order follows the version.
        const absl::Status cause = version.status();
        if (absl::Status late = rejoiner_.CheckDeadline(cause); !late.ok()) {
          version = late;
        } else {
          const absl::Span<float> weights = weights_.span;
          version = rejoiner_.Rejoin(cause, [&](absl::Duration timeout) {
            return JoinOnce(signature_, weights, timeout);
          });
          rejoined = version.ok();
        }
      }
    }
    EndStep();
    return {ValueOrThrow(std::move(version)), rejoined};
  }

  void AbandonStep() {
    if (!in_step_) return;
    {
      py::gil_scoped_release release;
      exchanger_->AbandonStep();
    }
    EndStep();
  }

  int64_t Pull(int64_t min_version, const py::buffer& weights, bool exact) {
    EnsureNoStep("pull");
    FloatBuffer w = RequestFloats(weights, /*writable=*/true, "weights");
    absl::StatusOr<int64_t> version;
    {
      py::gil_scoped_release release;
      version = client_->Pull(min_version, w.span, exact);
    }
    return ValueOrThrow(std::move(version));
  }

  void Leave() {
    EnsureNoStep("leave");
    absl::Status status;
    {
      py::gil_scoped_release release;
      status = exchanger_->Leave();
    }
    ThrowIfError(status);
  }

  py::dict Timings() const {
    const StepTimings t = client_->step_timings();
    py::dict d;
    d["steps"] = t.steps;
    d["encode_seconds"] = t.encode_seconds;
    d["send_seconds"] = t.send_seconds;
    d["wait_seconds"] = t.wait_seconds;
    d["decode_seconds"] = t.decode_seconds;
    return d;
  }

  int push_window() const { return client_->push_window(); }
  bool in_step() const { return in_step_; }
  int64_t rejoins() const { return rejoiner_.rejoins(); }

 private:
  // Registers; rank 0 defines version 0 from what `weights` holds now (the
  // framework's own initial weights) when the job has none.
  absl::StatusOr<int64_t> JoinOnce(const ModelSignature& signature,
                                   absl::Span<float> weights,
                                   absl::Duration timeout) {
    auto initial = [weights] {
      return std::vector<float>(weights.begin(), weights.end());
    };
    return exchanger_->Join(signature, initial, weights, timeout);
  }

  void EnsureNoStep(const char* what) const {
    if (in_step_) {
      throw py::value_error(absl::StrCat(what, ": a step is under way; "
                                               "finish or abandon it first"));
    }
  }
  void EndStep() {
    in_step_ = false;
    gradient_ = FloatBuffer();
    weights_ = FloatBuffer();
  }

  const int rank_;
  std::unique_ptr<PsClient> client_;
  std::unique_ptr<PsExchanger> exchanger_;
  Rejoiner rejoiner_;
  ModelSignature signature_;  // The last join's.
  bool in_step_ = false;
  FloatBuffer gradient_;  // Held while in_step_.
  FloatBuffer weights_;
};

py::array_t<int64_t> ToArray(const std::vector<int64_t>& values) {
  py::array_t<int64_t> out(static_cast<py::ssize_t>(values.size()));
  std::copy(values.begin(), values.end(), out.mutable_data());
  return out;
}

}  // namespace
}  // namespace lockstep

PYBIND11_MODULE(_native, m) {
  using lockstep::Client;
  m.doc() = "Lockstep's C++ worker client for Python (see lockstep/__init__.py)";

  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lockstep::StatusError& e) {
      const absl::Status& s = e.status;
      py::object cls = py::module_::import("lockstep.errors").attr("LockstepError");
      py::object error = cls(static_cast<int>(s.code()),
                             lockstep::CodeName(s.code()),
                             std::string(s.message()), lockstep::IsRetryable(s),
                             lockstep::ExitCodeFor(s));
      PyErr_SetObject(cls.ptr(), error.ptr());
    }
  });

  py::class_<Client>(m, "Client")
      .def(py::init([](std::vector<std::string> servers, int rank,
                       const std::string& wire_dtype, int push_window,
                       bool push_thread, double connect_timeout_s,
                       double rpc_timeout_s, double step_timeout_s,
                       double rejoin_timeout_s, uint64_t seed,
                       std::string tls_ca, std::string tls_cert,
                       std::string tls_key, std::string tls_server_name,
                       std::string token_file, bool insecure) {
             lockstep::TlsOptions tls;
             tls.ca_file = std::move(tls_ca);
             tls.cert_file = std::move(tls_cert);
             tls.key_file = std::move(tls_key);
             tls.server_name = std::move(tls_server_name);
             tls.token_file = std::move(token_file);
             tls.insecure = insecure;
             return std::make_unique<Client>(
                 std::move(servers), rank, wire_dtype, push_window, push_thread,
                 connect_timeout_s, rpc_timeout_s, step_timeout_s,
                 rejoin_timeout_s, seed, std::move(tls));
           }),
           py::arg("servers"), py::arg("rank"), py::arg("wire_dtype") = "fp32",
           py::arg("push_window") = lockstep::kAutoPushWindow,
           py::arg("push_thread") = false, py::arg("connect_timeout_s") = 60.0,
           py::arg("rpc_timeout_s") = 60.0, py::arg("step_timeout_s") = 300.0,
           py::arg("rejoin_timeout_s") = 300.0, py::arg("seed") = 42,
           py::arg("tls_ca") = "", py::arg("tls_cert") = "",
           py::arg("tls_key") = "", py::arg("tls_server_name") = "",
           py::arg("token_file") = "", py::arg("insecure") = false)
      .def("join", &Client::Join, py::arg("tensors"), py::arg("state_tensors"),
           py::arg("optimizer"), py::arg("learning_rate"), py::arg("momentum"),
           py::arg("nesterov"), py::arg("beta_1"), py::arg("beta_2"),
           py::arg("epsilon"), py::arg("weight_decay"), py::arg("chunk_bytes"),
           py::arg("num_workers"), py::arg("num_shards"), py::arg("sync"),
           py::arg("backup_workers"), py::arg("staleness"),
           py::arg("total_steps"), py::arg("weights"), py::arg("timeout_s"),
           "Registers (rank 0's weights buffer defines version 0 when the "
           "job has none) and pulls the version to start from into weights.")
      .def("begin_step", &Client::BeginStep, py::arg("step"),
           py::arg("gradient"), py::arg("weights"))
      .def("gradient_ready", &Client::GradientReady, py::arg("begin"),
           py::arg("end"))
      .def("finish_step", &Client::FinishStep)
      .def("abandon_step", &Client::AbandonStep)
      .def("pull", &Client::Pull, py::arg("min_version"), py::arg("weights"),
           py::arg("exact") = false)
      .def("leave", &Client::Leave)
      .def("timings", &Client::Timings)
      .def_property_readonly("push_window", &Client::push_window)
      .def_property_readonly("in_step", &Client::in_step)
      .def_property_readonly("rejoins", &Client::rejoins);

  py::class_<lockstep::ShardedSampler>(m, "ShardedSampler")
      .def(py::init([](int64_t num_examples, int num_workers, int rank,
                       int batch_size, uint64_t seed) {
             return lockstep::ValueOrThrow(lockstep::ShardedSampler::Create(
                 num_examples, num_workers, rank, batch_size, seed));
           }),
           py::arg("num_examples"), py::arg("num_workers"), py::arg("rank"),
           py::arg("batch_size"), py::arg("seed"))
      .def("steps_per_epoch", &lockstep::ShardedSampler::StepsPerEpoch)
      .def("batch_indices",
           [](lockstep::ShardedSampler& s, int64_t step) {
             if (step < 0) throw py::value_error("step must be >= 0");
             return lockstep::ToArray(s.BatchIndices(step));
           },
           py::arg("step"))
      .def("epoch_permutation",
           [](const lockstep::ShardedSampler& s, int64_t epoch) {
             return lockstep::ToArray(s.EpochPermutation(epoch));
           },
           py::arg("epoch"));

  m.def("parse_tf_config", [](const std::string& text) {
    const lockstep::TfConfig config =
        lockstep::ValueOrThrow(lockstep::ParseTfConfig(text));
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
    const lockstep::OptimizerConfig c = lockstep::OptimizerConfig::Defaults(name);
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

  m.def("write_safetensors",
        [](const std::string& path,
           const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors,
           const py::buffer& flat) {
          lockstep::FloatBuffer f =
              lockstep::RequestFloats(flat, /*writable=*/false, "flat");
          lockstep::ThrowIfError(lockstep::WriteSafetensors(
              path, lockstep::Tensors(tensors), f.span));
        },
        py::arg("path"), py::arg("tensors"), py::arg("flat"));

  m.def("read_safetensors", [](const std::string& path) {
    std::vector<lockstep::NamedTensor> tensors =
        lockstep::ValueOrThrow(lockstep::ReadSafetensors(path));
    py::list out;
    for (lockstep::NamedTensor& t : tensors) {
      py::array_t<float> values(static_cast<py::ssize_t>(t.values.size()));
      std::copy(t.values.begin(), t.values.end(), values.mutable_data());
      out.append(py::make_tuple(t.info.name, t.info.shape, values));
    }
    return out;
  }, py::arg("path"));

  // A data set as numpy arrays: features shaped `shape` after the count.
  auto to_arrays = [](const lockstep::Dataset& data,
                      std::vector<py::ssize_t> shape) {
    shape.insert(shape.begin(), static_cast<py::ssize_t>(data.num_examples));
    py::array_t<float> features(shape);
    std::copy(data.features.begin(), data.features.end(),
              features.mutable_data());
    py::array_t<int32_t> labels(static_cast<py::ssize_t>(data.num_examples));
    std::copy(data.labels.begin(), data.labels.end(), labels.mutable_data());
    return py::make_tuple(features, labels);
  };
  m.def("load_idx", [to_arrays](const std::string& dir, bool train) {
    lockstep::Dataset data;
    {
      py::gil_scoped_release release;
      data = lockstep::ValueOrThrow(lockstep::LoadIdxDataset(dir, train));
    }
    return to_arrays(data, {data.feature_dim});
  }, py::arg("dir"), py::arg("train"),
  "The IDX (MNIST-format) split in dir as lockstep_worker reads it: "
  "features scaled to [0, 1], shape (N, 784), and int32 labels.");
  m.def("load_cifar10", [to_arrays](const std::string& dir, bool train) {
    lockstep::Dataset data;
    {
      py::gil_scoped_release release;
      data = lockstep::ValueOrThrow(lockstep::LoadCifar10(dir, train));
    }
    return to_arrays(data, {lockstep::kCifarHeight, lockstep::kCifarWidth,
                            lockstep::kCifarChannels});
  }, py::arg("dir"), py::arg("train"),
  "CIFAR-10's binary files in dir as lockstep_worker reads them: images "
  "(N, 32, 32, 3), normalized per channel, and int32 labels.");

  m.attr("EXIT_PERMANENT") = lockstep::kExitPermanent;
  m.attr("EXIT_RETRYABLE") = lockstep::kExitRetryable;
  m.attr("EXIT_TERMINATED") = lockstep::kExitTerminated;
}
