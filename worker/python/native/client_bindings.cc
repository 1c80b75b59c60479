// lockstep._native.Client: the step session's client (client.h) as Python
// sees it, with its keyword arguments.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/python/native/client.h"
#include "worker/python/native/conversions.h"

namespace py = pybind11;

namespace lockstep {
namespace {

std::unique_ptr<Client> NewClient(
    std::vector<std::string> servers, int rank, std::string wire_dtype,
    int push_window, bool push_thread, double connect_timeout_s,
    double rpc_timeout_s, double step_timeout_s, double rejoin_timeout_s,
    uint64_t seed, std::string tls_ca, std::string tls_cert,
    std::string tls_key, std::string tls_server_name, std::string token_file,
    bool insecure, std::vector<std::string> standby_servers, std::string rounds,
    int local_steps, std::optional<double> outer_lr,
    std::optional<double> outer_momentum, std::string inner_state_dir) {
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
  o.inner_state_dir = std::move(inner_state_dir);
  return std::make_unique<Client>(std::move(o));
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

}  // namespace

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
           py::arg("outer_momentum") = py::none(),
           py::arg("inner_state_dir") = "")
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

}  // namespace lockstep
