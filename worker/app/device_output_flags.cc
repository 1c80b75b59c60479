// lockstep_worker's device and output flags (worker_flag_groups.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "worker/app/worker_flag_groups.h"

ABSL_FLAG(std::string, device, "auto",
          "auto | cpu | cuda. auto: the GPU when this build has CUDA and one "
          "is visible, else the CPU.");
ABSL_FLAG(int, gpu, 0, "CUDA GPU ordinal for --device=cuda or auto.");
ABSL_FLAG(bool, tf32, false,
          "Let cuBLAS use TF32 tensor cores (faster, ~1e-3 relative error); "
          "off: full fp32.");
ABSL_FLAG(int, cpu_threads, 1,
          "Threads of the CPU device: OpenBLAS's and the convolutions'.");
ABSL_FLAG(std::string, cpu_conv, "auto",
          "CPU convolutions: auto (AVX-512 kernels where they are faster) | "
          "direct (those kernels everywhere) | im2col (im2col + OpenBLAS).");
ABSL_FLAG(std::string, tensorboard_dir, "", "TensorBoard event dir (rank 0).");
ABSL_FLAG(double, trainer_status_every_s, 30,
          "Under Kubeflow Trainer with its status endpoint "
          "(KUBEFLOW_TRAINER_STATUS_SERVER_URL), rank 0 reports progress to "
          "the TrainJob's status at most this often, besides the first step "
          "of each epoch and the job's end.");
ABSL_FLAG(std::string, summary_json, "",
          "Write a JSON summary of the run here.");
ABSL_FLAG(std::string, step_log, "",
          "Rank 0 writes one CSV line per step here: step,seconds,loss "
          "(seconds since training began; the step's mean batch loss).");
ABSL_FLAG(std::string, dump_weights, "",
          "Write the final weights (parameters, then batch-norm state) here: "
          "a safetensors file keyed by tensor name when the path ends in "
          ".safetensors, else raw little-endian float32; {rank} in the path "
          "is this worker's rank.");
ABSL_FLAG(std::string, init_weights, "",
          "A safetensors file (tensors named as --dump_weights writes them) "
          "that rank 0 starts the job from instead of the seeded "
          "initializer. Ignored when the servers already hold weights.");
ABSL_FLAG(int, health_port, 0,
          "Serve grpc.health.v1 on this port, on every interface: SERVING "
          "while training (0: off). See docs/operations.md.");
ABSL_FLAG(int, metrics_port, 0,
          "Serve Prometheus metrics at http://HOST:PORT/metrics on every "
          "interface (0: off).");
ABSL_FLAG(std::string, trace, "",
          "Write a Chrome trace-event JSON file of every step's pull, "
          "compute, push and wait phases here (empty: off); {rank} in the "
          "path becomes the rank.");

namespace lockstep {

// The device, and what the worker writes and serves besides training.
absl::Status ParseDeviceAndOutputFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  const int rank = o.trainer.rank;
  o.device.kind = absl::GetFlag(FLAGS_device);
  o.device.gpu = absl::GetFlag(FLAGS_gpu);
  o.device.tf32 = absl::GetFlag(FLAGS_tf32);
  o.device.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  o.device.cpu_conv = absl::GetFlag(FLAGS_cpu_conv);
  o.summary_json = absl::GetFlag(FLAGS_summary_json);
  o.telemetry.rank = rank;
  o.telemetry.health_port = absl::GetFlag(FLAGS_health_port);
  o.telemetry.metrics_port = absl::GetFlag(FLAGS_metrics_port);
  o.telemetry.trace_path = absl::StrReplaceAll(
      absl::GetFlag(FLAGS_trace), {{"{rank}", absl::StrCat(rank)}});
  o.telemetry.examples_per_step = o.trainer.batch_size;
  for (int port : {o.telemetry.health_port, o.telemetry.metrics_port}) {
    if (port < 0 || port > 65535) {
      return absl::InvalidArgumentError(
          "--health_port and --metrics_port must be in [0, 65535]");
    }
  }
  o.dump_weights = absl::StrReplaceAll(absl::GetFlag(FLAGS_dump_weights),
                                       {{"{rank}", absl::StrCat(rank)}});
  o.init_weights = absl::GetFlag(FLAGS_init_weights);
  o.step_log = absl::GetFlag(FLAGS_step_log);
  o.tensorboard_dir = absl::GetFlag(FLAGS_tensorboard_dir);
  const double every = absl::GetFlag(FLAGS_trainer_status_every_s);
  if (!(every >= 0 && every <= 86400)) {
    return absl::InvalidArgumentError(
        "--trainer_status_every_s must be in [0, 86400]");
  }
  o.trainer_status_every = absl::Seconds(every);
  return absl::OkStatus();
}

}  // namespace lockstep
