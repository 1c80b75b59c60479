// The model signature: what every process of a job must agree on (tensor
// names and shapes, optimizer and its settings, chunking, worker count).
// Plain value types; the proto conversion lives in signature_proto.h.
#ifndef LOCKSTEP_COMMON_MODEL_MODEL_SIGNATURE_H_
#define LOCKSTEP_COMMON_MODEL_MODEL_SIGNATURE_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace lockstep {

// One named fp32 tensor of the model, row-major.
struct TensorInfo {
  std::string name;
  std::vector<int64_t> shape;

  int64_t NumElements() const;
  bool operator==(const TensorInfo& other) const;
};

// How the learning rate follows the global step (Keras's learning-rate
// schedules), with an optional linear warmup in front; lr(step) is
// LearningRateAt (common/optim/lr_schedule.h), which documents the formulas.
// The default is the constant rate. Settings another kind does not use
// stay at their defaults (checked), so that two signatures with the same
// schedule compare equal.
struct LrSchedule {
  std::string kind = "constant";  // constant | exponential | piecewise | cosine
  int64_t decay_steps = 0;        // exponential, cosine: at least 1.
  double decay_rate = 0;          // exponential: positive.
  bool staircase = false;         // exponential: whole decay periods only.
  std::vector<int64_t> boundaries;  // piecewise: increasing steps.
  std::vector<double> values;       // piecewise: one more than boundaries.
  double alpha = 0;                 // cosine: the floor, a fraction in [0, 1].
  int64_t warmup_steps = 0;  // Steps of linear warmup before the schedule.
  double warmup_from = 0;    // The rate at step 0 of the warmup.

  bool operator==(const LrSchedule& other) const;
};

// Optimizer choice and hyper-parameters. Defaults are Keras's for Adam; the
// other optimizers' Keras defaults come from OptimizerConfig::Defaults.
struct OptimizerConfig {
  std::string name = "adam";  // sgd | momentum | adam | adamw | average
  double learning_rate = 0.001;
  double momentum = 0.0;
  bool nesterov = false;
  double beta_1 = 0.9;
  double beta_2 = 0.999;
  double epsilon = 1e-7;
  double weight_decay = 0.0;
  // learning_rate is the schedule's initial (after warmup, peak) rate; a
  // piecewise schedule's values replace it.
  LrSchedule schedule;

  // Keras's defaults for `name` (learning rate 0.01 for SGD and momentum
  // (momentum 0.9 for the latter), 0.001 for Adam and AdamW, AdamW's weight
  // decay 0.004).
  static OptimizerConfig Defaults(const std::string& name);
  // The optimizers the servers (and all-reduce workers) run, in order:
  // "sgd", "momentum", "adam", "adamw"; the one list every check and the
  // Python package read.
  static const std::vector<std::string>& Names();
  static bool IsName(absl::string_view name);
  // The summation mode's name: the servers publish the mean of the workers'
  // gradients, not weights, and each worker runs its own optimizer on it
  // (lockstep.torch.DistributedOptimizer). Not one of Names(): only the
  // Python package's summation mode asks for it, never a flag.
  static constexpr const char* kAverage = "average";
  // A name the servers run: one of Names() or kAverage.
  static bool IsServerName(absl::string_view name);
  // "sgd, momentum, adam or adamw", for messages.
  static std::string NamesText();
  bool operator==(const OptimizerConfig& other) const;
};

// How a job's workers synchronize: the one enum for it, in the worker, the
// signature and the server.
enum class SyncMode {
  kSync,       // Synchronous parameter server (optionally backup workers).
  kAsync,      // Parameter server applying each gradient as it arrives.
  kSsp,        // Parameter server with bounded staleness.
  kAllReduce,  // Among the workers; no server in the data path. Its
               // signature says kSync: the servers only coordinate.
};

// How pushes become updates (see server/core/chunk_barrier.h).
struct SyncPolicy {
  SyncMode mode = SyncMode::kSync;
  int backup_workers = 0;  // kSync: a step needs W - backup_workers pushes.
  int staleness = 0;       // kSsp: how far ahead of the slowest one may run.
  // kSync, semi-synchronous (LocalSGD, DiLoCo): each worker runs this many
  // steps of ModelSignature::inner_optimizer on its own, then pushes the
  // change of its weights; a version is then one round of local steps.
  // 0 or 1: every step (the synchronous mode).
  int local_steps = 0;

  bool SemiSynchronous() const { return local_steps > 1; }
  bool operator==(const SyncPolicy& other) const {
    return mode == other.mode && backup_workers == other.backup_workers &&
           staleness == other.staleness &&
           std::max(local_steps, 1) == std::max(other.local_steps, 1);
  }
};

// "sync", "async", "ssp", "allreduce": the names in signatures and on the
// wire.
const char* SyncModeName(SyncMode mode);
// The modes a signature names, in order: "sync", "async", "ssp" (the
// Python package offers exactly these, read from its native module).
std::vector<std::string> SignatureSyncModeNames();
// The inverse for a signature, the one place a mode's name is read:
// "sync", "async" or "ssp" ("" is "sync", as a signature from before modes
// had names says); INVALID_ARGUMENT otherwise, "allreduce" included (an
// all-reduce job's signature says "sync").
absl::StatusOr<SyncMode> ParseSyncMode(absl::string_view name);

inline constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;

struct ModelSignature {
  std::vector<TensorInfo> tensors;
  // Non-trainable model state (batch-norm moving mean and variance). It
  // travels after the parameters in the flat vector; servers keep the mean
  // of what workers push for it instead of running the optimizer.
  std::vector<TensorInfo> state_tensors;
  OptimizerConfig optimizer;
  int64_t chunk_bytes = kDefaultChunkBytes;
  int num_workers = 1;
  int num_shards = 1;  // Server shards the chunks are spread over.
  SyncPolicy sync;
  // The job's length in global steps. Every worker computes it from the
  // shared data size and W x B; a worker that disagrees (other data, other
  // --epochs) is refused at registration instead of leaving the others
  // waiting at a barrier it will never reach. 0: not checked.
  int64_t total_steps = 0;
  // Semi-synchronous jobs (sync.local_steps above 1): what each worker runs
  // on its local steps; `optimizer` is then the outer one the servers run
  // on the mean change of the workers' weights. Compared only then.
  OptimizerConfig inner_optimizer;

  // Total fp32 elements over the trainable tensors.
  int64_t NumParameters() const;
  // Total fp32 elements over the state tensors.
  int64_t NumStateElements() const;
  // Offset of each tensor in the flat parameter vector.
  std::vector<int64_t> TensorOffsets() const;
};

// Human-readable description of how `got` differs from `expected`, naming the
// first differing tensor or setting; empty when they are the same.
std::string DescribeDifference(const ModelSignature& expected,
                               const ModelSignature& got);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MODEL_MODEL_SIGNATURE_H_
