#include "worker/app/worker_flags.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/flags/flags.h"
#include "common/formats/tf_config.h"
#include "common/security/tls_flags.h"
#include "common/wire/wire_codec.h"
#include "worker/app/optimizer_flags.h"
#include "worker/app/setup.h"
#include "worker/train/progress.h"

ABSL_FLAG(std::string, servers, "",
          "Parameter-server shard addresses, host:port, comma-separated in "
          "shard order. Default: TF_CONFIG's ps list.");
ABSL_FLAG(int, rank, -1,
          "This worker's rank in [0, workers). Default: from "
          "TF_CONFIG (chief is 0, worker i is i+1 with a chief).");
ABSL_FLAG(int, workers, 0,
          "Workers in the job. Default: TF_CONFIG's chief + worker count.");
ABSL_FLAG(std::string, model, "mlp",
          "mlp (see --layers), cnn (LeNet-style), resnet20 or resnet50.");
ABSL_FLAG(std::string, layers, "784,128,10",
          "MLP layer sizes, input first, classes last.");
ABSL_FLAG(std::string, input_shape, "",
          "Image models: H,W,C of an example (default: the data set's; "
          "32,32,3 for synthetic images).");
ABSL_FLAG(bool, augment, false,
          "Image models: random crops (padding 4) and horizontal flips.");
ABSL_FLAG(int, batch_size, 64, "Examples per worker per step.");
ABSL_FLAG(int, epochs, 5, "Passes over the training set.");
ABSL_FLAG(int64_t, max_steps, 0, "If > 0, stop after this many global steps.");
ABSL_FLAG(uint64_t, seed, 42,
          "Seed of the initial weights and of the shared data order.");
ABSL_FLAG(std::string, dataset, "idx",
          "idx (MNIST-format files in --data_dir), cifar10 (CIFAR-10's binary "
          "files in --data_dir) or synthetic.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].");
ABSL_FLAG(int64_t, synthetic_examples, 6400,
          "Training examples of --dataset=synthetic (test set: a fifth).");
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
ABSL_FLAG(std::string, chunk_bytes, "auto",
          "Largest tensor chunk on the wire: auto (about 32 chunks per "
          "server shard, 256 KiB to 4 MiB; one chunk per shard for a model "
          "of at most 1 MiB per shard) or bytes, at most 32 MiB.");
ABSL_FLAG(std::string, progress, "auto", "auto | bar | lines | none.");
ABSL_FLAG(std::string, sync, "ps",
          "How gradients are combined: ps (synchronous parameter server), "
          "allreduce (among the workers, see --allreduce; the first server "
          "only hosts the rendezvous), async (the server applies each "
          "gradient as it arrives) or ssp (bounded staleness, --staleness).");
ABSL_FLAG(std::string, allreduce, "gloo",
          "sync=allreduce backend: gloo (TCP), grpc-ring (Lockstep's own "
          "ring over gRPC) or nccl (GPUs).");
ABSL_FLAG(std::string, allreduce_host, "127.0.0.1",
          "sync=allreduce: the address other workers reach this one at.");
ABSL_FLAG(std::string, allreduce_group, "lockstep",
          "sync=allreduce: rendezvous key prefix; use a new one per run "
          "against a long-lived server.");
ABSL_FLAG(int, min_workers, 0,
          "sync=allreduce or ps: the fewest workers the job goes on with "
          "(elastic: ranks may leave and join at step boundaries while at "
          "least this many train; --workers is then the most). 0: --workers.");
ABSL_FLAG(int, group_settle_ms, 1000,
          "with --min_workers: how long a re-forming group waits for more "
          "members after the last one joined.");
ABSL_FLAG(int, backup_workers, 0,
          "sync=ps: each step applies the first workers - b gradients to "
          "arrive; late ones are dropped and counted.");
ABSL_FLAG(int, staleness, 1,
          "sync=ssp: how many steps a worker may run ahead of the slowest.");
ABSL_FLAG(std::string, straggle, "",
          "Slow ranks on purpose: RANK:MS[,RANK:MS...] adds MS milliseconds "
          "to every step of RANK.");
ABSL_FLAG(int, straggle_random_ms, 0,
          "Adds a random delay, uniform in [0, N] ms and seeded, to every "
          "step of every worker.");
ABSL_FLAG(std::string, wire_dtype, "fp32",
          "Encoding of gradients and weights on the wire: fp32 | bf16 | fp16 "
          "(servers always sum and keep fp32).");
ABSL_FLAG(std::string, push_window, "auto",
          "Gradient chunks a worker has in flight to each server shard at "
          "once (a push waits at the server until every worker has pushed "
          "that chunk); 0: every chunk as soon as it is ready; auto: as many "
          "as keep all workers' pushes at a shard within 32 MiB, 1 to 4 "
          "(4 MiB chunks: 2 workers 4, 4 workers 2, 8 or more 1).");
ABSL_FLAG(std::string, push_thread, "auto",
          "Where gradient chunks are encoded and their pushes started: on "
          "(a thread of their own, so that the training thread only queues "
          "the backward pass), off (the training thread, as each layer's "
          "gradient is ready), or auto (on with a GPU, off on the CPU).");
ABSL_FLAG(bool, eval_every_epoch, false,
          "Rank 0 evaluates on the test set after every epoch.");
ABSL_FLAG(double, validation_split, 0,
          "Evaluate on the last fraction F of the training data, as Keras.");
ABSL_FLAG(std::string, tensorboard_dir, "", "TensorBoard event dir (rank 0).");
ABSL_FLAG(std::string, summary_json, "",
          "Write a JSON summary of the run here.");
ABSL_FLAG(std::string, step_log, "",
          "Rank 0 writes one CSV line per step here: step,seconds,loss "
          "(seconds since training began; the step's mean batch loss).");
ABSL_FLAG(std::string, dump_weights, "",
          "Write the final weights (parameters, then batch-norm state) here: "
          "a safetensors file keyed by tensor name when the path ends in "
          ".safetensors, else raw little-endian float32.");
ABSL_FLAG(std::string, init_weights, "",
          "A safetensors file (tensors named as --dump_weights writes them) "
          "that rank 0 starts the job from instead of the seeded "
          "initializer. Ignored when the servers already hold weights.");
ABSL_FLAG(int, connect_timeout_s, 60, "Seconds to wait for the server.");
ABSL_FLAG(int, rejoin_timeout_s, 300,
          "After the server restarts, gives up on a step or evicts this "
          "worker, keep registering again (with backoff) for this long.");
ABSL_FLAG(int, step_timeout_s, 300,
          "Seconds a step's pushes may take from the step's start, the "
          "backward pass and waiting for the slowest worker included.");
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
namespace {

// The servers, this worker's rank and the job's workers (flags, TF_CONFIG).
absl::Status ParseJob(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  std::string servers = absl::GetFlag(FLAGS_servers);
  int rank = absl::GetFlag(FLAGS_rank);
  int workers = absl::GetFlag(FLAGS_workers);
  if (const char* env = std::getenv("TF_CONFIG"); env != nullptr && *env) {
    ASSIGN_OR_RETURN(TfConfig tf, ParseTfConfig(env));
    if (servers.empty()) servers = absl::StrJoin(tf.PsAddresses(), ",");
    if (workers == 0) workers = tf.NumWorkers();
    if (rank < 0) {
      ASSIGN_OR_RETURN(rank, tf.WorkerRank());
    }
  }
  if (servers.empty()) {
    return absl::InvalidArgumentError(
        "no parameter server: pass --servers=HOST:PORT or set TF_CONFIG");
  }
  o.session.client.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
  o.trainer.num_shards = static_cast<int>(o.session.client.servers.size());
  if (workers < 1) {
    return absl::InvalidArgumentError(
        "--workers must be at least 1 (or come from TF_CONFIG)");
  }
  if (rank < 0 || rank >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rank must be in [0, ", workers, "), got ", rank));
  }
  o.trainer.rank = rank;
  o.trainer.num_workers = workers;
  return absl::OkStatus();
}

// The model, its data and how it is trained.
absl::Status ParseTraining(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  ASSIGN_OR_RETURN(const std::vector<int> layers,
                   ParseLayers(absl::GetFlag(FLAGS_layers)));
  ASSIGN_OR_RETURN(o.trainer.optimizer, OptimizerFromFlags());
  o.trainer.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.trainer.epochs = absl::GetFlag(FLAGS_epochs);
  o.trainer.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.trainer.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(
      o.trainer.chunk_bytes,
      FromFlag("chunk_bytes", ParseChunkBytes(absl::GetFlag(FLAGS_chunk_bytes),
                                              int64_t{32} << 20)));
  o.trainer.eval_every_epoch = absl::GetFlag(FLAGS_eval_every_epoch);
  o.validation_split = absl::GetFlag(FLAGS_validation_split);
  ASSIGN_OR_RETURN(
      o.trainer.progress,
      FromFlag("progress", ParseProgressMode(absl::GetFlag(FLAGS_progress))));
  if (o.trainer.batch_size < 1 || o.trainer.batch_size > (1 << 20)) {
    return absl::InvalidArgumentError("--batch_size must be in [1, 1048576]");
  }
  if (o.trainer.epochs < 1) {
    return absl::InvalidArgumentError("--epochs must be at least 1");
  }
  o.data.dataset = absl::GetFlag(FLAGS_dataset);
  o.data.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.data.synthetic_examples = absl::GetFlag(FLAGS_synthetic_examples);
  o.data.seed = o.trainer.seed;
  if (o.data.synthetic_examples < 1) {
    return absl::InvalidArgumentError("--synthetic_examples must be positive");
  }
  if (o.data.dataset == "cifar10" &&
      o.data.data_dir == "/usr/share/datasets/fashion-mnist") {
    o.data.data_dir.clear();  // The default is Fashion-MNIST's folder.
  }
  ASSIGN_OR_RETURN(o.model,
                   MakeModelSpec(absl::GetFlag(FLAGS_model), layers,
                                 absl::GetFlag(FLAGS_input_shape), o.data));
  if (o.model.name != "mlp") {
    o.trainer.image_size = ImageSizeOf(o.model);
    o.trainer.augmentation.random_crop = absl::GetFlag(FLAGS_augment);
    o.trainer.augmentation.horizontal_flip = absl::GetFlag(FLAGS_augment);
  }
  return absl::OkStatus();
}

// The device, and what the worker writes and serves besides training.
absl::Status ParseDeviceAndOutputs(WorkerMainOptions* options) {
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
  o.dump_weights = absl::GetFlag(FLAGS_dump_weights);
  o.init_weights = absl::GetFlag(FLAGS_init_weights);
  o.step_log = absl::GetFlag(FLAGS_step_log);
  o.tensorboard_dir = absl::GetFlag(FLAGS_tensorboard_dir);
  return absl::OkStatus();
}

// How the worker exchanges: its deadlines, credentials and sync mode.
absl::Status ParseExchange(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  for (const auto& [name, value] :
       {std::pair<const char*, int>{"connect_timeout_s",
                                    absl::GetFlag(FLAGS_connect_timeout_s)},
        {"step_timeout_s", absl::GetFlag(FLAGS_step_timeout_s)},
        {"rejoin_timeout_s", absl::GetFlag(FLAGS_rejoin_timeout_s)}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " must be at least 1 (seconds), got ", value));
    }
  }
  // The one place the worker reads --tls_* and --token_file: the client
  // and the all-reduce library are given the result.
  ASSIGN_OR_RETURN(o.session.client.tls, TlsOptionsFromFlags());
  o.session.reducer.tls = o.session.client.tls;
  o.session.client.connect_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  o.session.client.step_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  o.session.rejoin_timeout_name = "--rejoin_timeout_s";
  o.session.rejoin_timeout =
      absl::Seconds(absl::GetFlag(FLAGS_rejoin_timeout_s));
  const std::string sync = absl::GetFlag(FLAGS_sync);
  const int rank = o.trainer.rank;
  const int workers = o.trainer.num_workers;
  o.session.rank = rank;
  o.session.num_workers = workers;
  o.session.who = absl::StrCat("lockstep_worker ", rank);
  o.session.seed = o.trainer.seed;
  o.session.allreduce = sync == "allreduce";
  if (sync == "ps") {
    o.trainer.sync = SyncMode::kSync;
  } else if (sync == "async") {
    o.trainer.sync = SyncMode::kAsync;
  } else if (sync == "ssp") {
    o.trainer.sync = SyncMode::kSsp;
  } else if (sync == "allreduce") {
    o.trainer.sync = SyncMode::kAllReduce;
    o.session.reducer.backend = absl::GetFlag(FLAGS_allreduce);
    o.session.reducer.rank = rank;
    o.session.reducer.size = workers;
    o.session.reducer.coordinator = o.session.client.servers.front();
    o.session.reducer.host = absl::GetFlag(FLAGS_allreduce_host);
    o.session.reducer.group = absl::GetFlag(FLAGS_allreduce_group);
    o.session.reducer.gpu =
        o.device.gpu;  // NCCL's ranks each on their own GPU.
    // The same deadlines as in PS mode: waiting for the other ranks to
    // arrive, and for one step's exchange (the slowest rank's compute, or
    // rank 0's evaluation, included).
    o.session.reducer.rendezvous_timeout = o.session.client.connect_timeout;
    o.session.reducer.op_timeout = o.session.client.step_timeout;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sync must be ps, allreduce, async or ssp, got \"", sync, "\""));
  }
  return absl::OkStatus();
}

// --min_workers and --group_settle_ms: how an all-reduce group forms.
absl::Status ParseGroupFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  const int workers = o.trainer.num_workers;
  o.session.group.min_workers = absl::GetFlag(FLAGS_min_workers);
  if (o.session.group.min_workers < 0 ||
      o.session.group.min_workers > workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min_workers must be in [1, --workers=", workers,
                     "] (or 0), got ", o.session.group.min_workers));
  }
  if (o.session.group.min_workers > 0 &&
      o.session.group.min_workers < workers &&
      o.trainer.sync != SyncMode::kAllReduce &&
      (o.trainer.sync != SyncMode::kSync ||
       absl::GetFlag(FLAGS_backup_workers) > 0)) {
    return absl::InvalidArgumentError(
        "--min_workers below --workers needs --sync=allreduce, or --sync=ps "
        "without --backup_workers: the asynchronous modes have no steps "
        "every worker shares");
  }
  const int settle_ms = absl::GetFlag(FLAGS_group_settle_ms);
  if (settle_ms < 0 || settle_ms > 600000) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--group_settle_ms must be in [0, 600000], got ", settle_ms));
  }
  o.session.group.settle = absl::Milliseconds(settle_ms);
  return absl::OkStatus();
}

// Backup workers, staleness, stragglers, and how pushes go on the wire.
absl::Status ParseStepFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  const int rank = o.trainer.rank;
  const int workers = o.trainer.num_workers;
  o.trainer.backup_workers = absl::GetFlag(FLAGS_backup_workers);
  if (o.trainer.backup_workers < 0 || o.trainer.backup_workers >= workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("--backup_workers must be in [0, ", workers, ")"));
  }
  if (o.trainer.backup_workers > 0 && o.trainer.sync != SyncMode::kSync) {
    return absl::InvalidArgumentError("--backup_workers needs --sync=ps");
  }
  RETURN_IF_ERROR(ParseGroupFlags(&o));
  o.trainer.staleness = absl::GetFlag(FLAGS_staleness);
  if (o.trainer.staleness < 0) {
    return absl::InvalidArgumentError("--staleness must not be negative");
  }
  ASSIGN_OR_RETURN(o.trainer.straggle_ms,
                   StraggleFor(absl::GetFlag(FLAGS_straggle), rank));
  o.trainer.straggle_random_ms = absl::GetFlag(FLAGS_straggle_random_ms);
  if (o.trainer.straggle_random_ms < 0) {
    return absl::InvalidArgumentError(
        "--straggle_random_ms must not be negative");
  }
  ASSIGN_OR_RETURN(o.session.client.wire_dtype,
                   ParseWireDType(absl::GetFlag(FLAGS_wire_dtype)));
  // auto picks at most kDefaultChunkBytes.
  o.session.client.max_message_bytes =
      static_cast<int>(o.trainer.chunk_bytes == kAutoChunkBytes
                           ? kDefaultChunkBytes
                           : o.trainer.chunk_bytes) +
      (1 << 20);
  ASSIGN_OR_RETURN(o.session.client.max_pushes_in_flight,
                   FromFlag("push_window",
                            ParsePushWindow(absl::GetFlag(FLAGS_push_window))));
  const std::string push_thread = absl::GetFlag(FLAGS_push_thread);
  if (push_thread == "on" || push_thread == "off") {
    o.push_thread = push_thread == "on";
  } else if (push_thread != "auto") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--push_thread must be on, off or auto, got \"", push_thread, "\""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WorkerMainOptions> WorkerOptionsFromFlags() {
  WorkerMainOptions o;
  RETURN_IF_ERROR(ParseJob(&o));
  RETURN_IF_ERROR(ParseTraining(&o));
  RETURN_IF_ERROR(ParseDeviceAndOutputs(&o));
  RETURN_IF_ERROR(ParseExchange(&o));
  RETURN_IF_ERROR(ParseStepFlags(&o));
  o.sync = absl::GetFlag(FLAGS_sync);
  o.layers = absl::GetFlag(FLAGS_layers);
  return o;
}

}  // namespace lockstep
