#include "common/model_signature.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace lockstep {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

const char* SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kSync: return "sync";
    case SyncMode::kAsync: return "async";
    case SyncMode::kSsp: return "ssp";
    case SyncMode::kAllReduce: return "allreduce";
  }
  return "?";
}

absl::StatusOr<SyncMode> ParseSyncMode(absl::string_view name) {
  if (name.empty() || name == "sync") return SyncMode::kSync;
  if (name == "async") return SyncMode::kAsync;
  if (name == "ssp") return SyncMode::kSsp;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sync mode \"", name, "\"; expected sync, async or ssp"));
}

int64_t TensorInfo::NumElements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

bool TensorInfo::operator==(const TensorInfo& other) const {
  return name == other.name && shape == other.shape;
}

OptimizerConfig OptimizerConfig::Defaults(const std::string& name) {
  OptimizerConfig config;
  config.name = name;
  if (name == "sgd") {
    config.learning_rate = 0.01;
  } else if (name == "momentum") {
    config.learning_rate = 0.01;
    config.momentum = 0.9;
  } else if (name == "adamw") {
    config.weight_decay = 0.004;
  }
  return config;
}

bool OptimizerConfig::operator==(const OptimizerConfig& o) const {
  return name == o.name && learning_rate == o.learning_rate &&
         momentum == o.momentum && nesterov == o.nesterov &&
         beta_1 == o.beta_1 && beta_2 == o.beta_2 && epsilon == o.epsilon &&
         weight_decay == o.weight_decay;
}

int64_t ModelSignature::NumParameters() const {
  int64_t n = 0;
  for (const TensorInfo& t : tensors) n += t.NumElements();
  return n;
}

int64_t ModelSignature::NumStateElements() const {
  int64_t n = 0;
  for (const TensorInfo& t : state_tensors) n += t.NumElements();
  return n;
}

std::vector<int64_t> ModelSignature::TensorOffsets() const {
  std::vector<int64_t> offsets;
  int64_t offset = 0;
  for (const TensorInfo& t : tensors) {
    offsets.push_back(offset);
    offset += t.NumElements();
  }
  return offsets;
}

std::string DescribeDifference(const ModelSignature& expected,
                               const ModelSignature& got) {
  if (expected.num_workers != got.num_workers) {
    return absl::StrCat("num_workers: job has ", expected.num_workers,
                        ", worker says ", got.num_workers);
  }
  if (expected.num_shards != got.num_shards) {
    return absl::StrCat("num_shards: job has ", expected.num_shards,
                        ", worker says ", got.num_shards);
  }
  if (expected.tensors.size() != got.tensors.size()) {
    return absl::StrCat("tensor count: job has ", expected.tensors.size(),
                        ", worker has ", got.tensors.size());
  }
  for (size_t i = 0; i < expected.tensors.size(); ++i) {
    const TensorInfo& e = expected.tensors[i];
    const TensorInfo& g = got.tensors[i];
    if (!(e == g)) {
      return absl::StrCat("tensor ", i, ": job has ", e.name,
                          ShapeString(e.shape), ", worker has ", g.name,
                          ShapeString(g.shape));
    }
  }
  if (expected.state_tensors.size() != got.state_tensors.size()) {
    return absl::StrCat("state tensor count: job has ",
                        expected.state_tensors.size(), ", worker has ",
                        got.state_tensors.size());
  }
  for (size_t i = 0; i < expected.state_tensors.size(); ++i) {
    const TensorInfo& e = expected.state_tensors[i];
    const TensorInfo& g = got.state_tensors[i];
    if (!(e == g)) {
      return absl::StrCat("state tensor ", i, ": job has ", e.name,
                          ShapeString(e.shape), ", worker has ", g.name,
                          ShapeString(g.shape));
    }
  }
  const OptimizerConfig& eo = expected.optimizer;
  const OptimizerConfig& go = got.optimizer;
  if (!(eo == go)) {
    return absl::StrCat(
        "optimizer: job has ", eo.name, "(lr=", eo.learning_rate,
        " momentum=", eo.momentum, " nesterov=", eo.nesterov,
        " beta_1=", eo.beta_1, " beta_2=", eo.beta_2, " epsilon=", eo.epsilon,
        " weight_decay=", eo.weight_decay, "), worker has ", go.name,
        "(lr=", go.learning_rate, " momentum=", go.momentum,
        " nesterov=", go.nesterov, " beta_1=", go.beta_1, " beta_2=",
        go.beta_2, " epsilon=", go.epsilon, " weight_decay=", go.weight_decay,
        ")");
  }
  if (!(expected.sync == got.sync)) {
    return absl::StrCat("sync: job has ", SyncModeName(expected.sync.mode),
                        " (backup_workers=", expected.sync.backup_workers,
                        " staleness=", expected.sync.staleness,
                        "), worker has ", SyncModeName(got.sync.mode),
                        " (backup_workers=", got.sync.backup_workers,
                        " staleness=", got.sync.staleness, ")");
  }
  if (expected.total_steps != got.total_steps) {
    return absl::StrCat("total_steps: job has ", expected.total_steps,
                        ", worker has ", got.total_steps,
                        " (different data, batch size or --epochs)");
  }
  if (expected.chunk_bytes != got.chunk_bytes) {
    return absl::StrCat("chunk_bytes: job has ", expected.chunk_bytes,
                        ", worker has ", got.chunk_bytes);
  }
  return "";
}

}  // namespace lockstep
