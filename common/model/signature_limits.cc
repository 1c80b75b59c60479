#include "common/model/signature_limits.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace {

absl::Status OutOfBounds(absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat("model signature out of bounds: ", what));
}

// Checks each tensor of `tensors` (`kind`: "tensor" or "state tensor") and
// adds its elements to `*total`, which stays within max_parameters.
absl::Status CheckTensors(const std::vector<TensorInfo>& tensors,
                          absl::string_view kind, const SignatureLimits& limits,
                          int64_t* total) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = tensors[i];
    if (t.name.size() > static_cast<size_t>(limits.max_name_bytes)) {
      return OutOfBounds(
          absl::StrCat(kind, " ", i, "'s name has ", t.name.size(), " bytes"));
    }
    if (t.shape.size() > static_cast<size_t>(limits.max_dims)) {
      return OutOfBounds(absl::StrCat(kind, " ", i, " has ", t.shape.size(),
                                      " dimensions, at most ",
                                      limits.max_dims));
    }
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d < 0) {
        return OutOfBounds(absl::StrCat(kind, " ", i, " has dimension ", d));
      }
      if (__builtin_mul_overflow(elements, d, &elements) ||
          elements > limits.max_parameters) {
        elements = limits.max_parameters + 1;
        break;
      }
    }
    *total += elements;
    if (elements > limits.max_parameters || *total > limits.max_parameters) {
      return OutOfBounds(absl::StrCat("more than ", limits.max_parameters,
                                      " parameters and state values (the "
                                      "server's limit)"));
    }
  }
  return absl::OkStatus();
}

// Checks the chunk size, workers and shards, and the chunks that the
// model's `parameters` and `state` values make.
absl::Status CheckChunks(const ModelSignature& s, int64_t parameters,
                         int64_t state, const SignatureLimits& limits) {
  if (s.chunk_bytes < 4 || s.chunk_bytes > limits.max_chunk_bytes) {
    return OutOfBounds(absl::StrCat("chunk_bytes ", s.chunk_bytes,
                                    " is outside [4, ", limits.max_chunk_bytes,
                                    "] (the server's limit)"));
  }
  if (s.num_workers < 1 || s.num_workers > limits.max_workers) {
    return OutOfBounds(absl::StrCat("num_workers ", s.num_workers));
  }
  if (s.num_shards < 1 || s.num_shards > limits.max_shards) {
    return OutOfBounds(absl::StrCat("num_shards ", s.num_shards));
  }
  // As ChunkPlan cuts them (parameters and state apart): never more chunks
  // than this. Each chunk also keeps a few values per worker.
  int64_t per_chunk = s.chunk_bytes / 4;
  if (s.num_shards > 1) {
    // ChunkPlan shrinks chunks so that every shard gets some parameters,
    // and the state is cut in chunks of that size too.
    const int64_t per_shard = (parameters + s.num_shards - 1) / s.num_shards;
    per_chunk = std::max<int64_t>(1, std::min(per_chunk, per_shard));
  }
  const int64_t chunks = (parameters + per_chunk - 1) / per_chunk +
                         (state + per_chunk - 1) / per_chunk +
                         (s.num_shards > 1 ? s.num_shards : 0);
  if (chunks > limits.max_chunks) {
    return OutOfBounds(absl::StrCat("about ", chunks, " chunks, at most ",
                                    limits.max_chunks,
                                    " (use a larger chunk size)"));
  }
  if (chunks * s.num_workers > limits.max_chunk_workers) {
    return OutOfBounds(absl::StrCat(
        "about ", chunks, " chunks x ", s.num_workers, " workers, at most ",
        limits.max_chunk_workers, " (use a larger chunk size)"));
  }
  return absl::OkStatus();
}

// Checks the optimizer's name and settings, the step count and the sync
// settings.
absl::Status CheckSettings(const ModelSignature& s,
                           const SignatureLimits& limits) {
  for (const OptimizerConfig* o : {&s.optimizer, &s.inner_optimizer}) {
    if (o->name.size() > static_cast<size_t>(limits.max_name_bytes)) {
      return OutOfBounds("optimizer name too long");
    }
    for (double v : {o->learning_rate, o->momentum, o->beta_1, o->beta_2,
                     o->epsilon, o->weight_decay}) {
      if (!std::isfinite(v)) {
        return OutOfBounds("an optimizer setting is not a finite number");
      }
    }
  }
  if (s.total_steps < 0) return OutOfBounds("negative total_steps");
  if (s.sync.backup_workers < 0 || s.sync.staleness < 0 ||
      s.sync.local_steps < 0) {
    return OutOfBounds("negative backup_workers, staleness or local_steps");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSignature(const ModelSignature& s,
                               const SignatureLimits& limits) {
  if (s.tensors.empty()) return OutOfBounds("no tensors");
  if (s.tensors.size() + s.state_tensors.size() >
      static_cast<size_t>(limits.max_tensors)) {
    return OutOfBounds(absl::StrCat(s.tensors.size() + s.state_tensors.size(),
                                    " tensors, at most ", limits.max_tensors));
  }
  int64_t total = 0;
  if (absl::Status st = CheckTensors(s.tensors, "tensor", limits, &total);
      !st.ok()) {
    return st;
  }
  if (total == 0) return OutOfBounds("the model has no parameters");
  const int64_t parameters = total;
  if (absl::Status st =
          CheckTensors(s.state_tensors, "state tensor", limits, &total);
      !st.ok()) {
    return st;
  }
  if (absl::Status st = CheckChunks(s, parameters, total - parameters, limits);
      !st.ok()) {
    return st;
  }
  return CheckSettings(s, limits);
}

}  // namespace lockstep
