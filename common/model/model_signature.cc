#include "common/model/model_signature.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"

namespace lockstep {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

const char* SyncModeName(SyncMode mode) {
  switch (mode) {
    case SyncMode::kSync:
      return "sync";
    case SyncMode::kAsync:
      return "async";
    case SyncMode::kSsp:
      return "ssp";
    case SyncMode::kAllReduce:
      return "allreduce";
  }
  return "?";
}

std::vector<std::string> SignatureSyncModeNames() {
  return {SyncModeName(SyncMode::kSync), SyncModeName(SyncMode::kAsync),
          SyncModeName(SyncMode::kSsp)};
}

absl::StatusOr<SyncMode> ParseSyncMode(absl::string_view name) {
  if (name.empty()) return SyncMode::kSync;
  for (SyncMode mode : {SyncMode::kSync, SyncMode::kAsync, SyncMode::kSsp}) {
    if (name == SyncModeName(mode)) return mode;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown sync mode \"", name, "\"; expected sync, async or ssp"));
}

const std::vector<std::string>& OptimizerConfig::Names() {
  static const auto* const names =
      new std::vector<std::string>{"sgd", "momentum", "adam", "adamw"};
  return *names;
}

bool OptimizerConfig::IsName(absl::string_view name) {
  for (const std::string& known : Names()) {
    if (name == known) return true;
  }
  return false;
}

bool OptimizerConfig::IsServerName(absl::string_view name) {
  return IsName(name) || name == kAverage;
}

std::string OptimizerConfig::NamesText() {
  const std::vector<std::string>& names = Names();
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) text += i + 1 == names.size() ? " or " : ", ";
    text += names[i];
  }
  return text;
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

bool LrSchedule::operator==(const LrSchedule& o) const {
  return kind == o.kind && decay_steps == o.decay_steps &&
         decay_rate == o.decay_rate && staircase == o.staircase &&
         boundaries == o.boundaries && values == o.values && alpha == o.alpha &&
         warmup_steps == o.warmup_steps && warmup_from == o.warmup_from;
}

bool OptimizerConfig::operator==(const OptimizerConfig& o) const {
  return name == o.name && learning_rate == o.learning_rate &&
         momentum == o.momentum && nesterov == o.nesterov &&
         beta_1 == o.beta_1 && beta_2 == o.beta_2 && epsilon == o.epsilon &&
         weight_decay == o.weight_decay && schedule == o.schedule;
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

namespace {

// The first difference between two lists of tensors ("tensor" or "state
// tensor", `what`); empty when they match.
std::string TensorsDifference(absl::string_view what,
                              const std::vector<TensorInfo>& expected,
                              const std::vector<TensorInfo>& got) {
  if (expected.size() != got.size()) {
    return absl::StrCat(what, " count: job has ", expected.size(),
                        ", worker has ", got.size());
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& e = expected[i];
    const TensorInfo& g = got[i];
    if (!(e == g)) {
      return absl::StrCat(what, " ", i, ": job has ", e.name,
                          ShapeString(e.shape), ", worker has ", g.name,
                          ShapeString(g.shape));
    }
  }
  return "";
}

// "exponential(decay_steps=100 ... warmup_from=0)": every setting, so that
// two schedules that differ read differently.
std::string ScheduleString(const LrSchedule& s) {
  return absl::StrCat(s.kind, "(decay_steps=", s.decay_steps,
                      " decay_rate=", s.decay_rate, " staircase=", s.staircase,
                      " boundaries=[", absl::StrJoin(s.boundaries, ","),
                      "] values=[", absl::StrJoin(s.values, ","),
                      "] alpha=", s.alpha, " warmup_steps=", s.warmup_steps,
                      " warmup_from=", s.warmup_from, ")");
}

// "adam(lr=... weight_decay=...)", and the schedule when it is not the
// constant rate.
std::string OptimizerString(const OptimizerConfig& o) {
  std::string text = absl::StrCat(
      o.name, "(lr=", o.learning_rate, " momentum=", o.momentum,
      " nesterov=", o.nesterov, " beta_1=", o.beta_1, " beta_2=", o.beta_2,
      " epsilon=", o.epsilon, " weight_decay=", o.weight_decay, ")");
  if (!(o.schedule == LrSchedule())) {
    absl::StrAppend(&text, " lr_schedule=", ScheduleString(o.schedule));
  }
  return text;
}

// "sync (backup_workers=0 staleness=0 local_steps=1)".
std::string SyncString(const SyncPolicy& sync) {
  return absl::StrCat(SyncModeName(sync.mode),
                      " (backup_workers=", sync.backup_workers,
                      " staleness=", sync.staleness,
                      " local_steps=", std::max(sync.local_steps, 1), ")");
}

}  // namespace

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
  if (std::string d =
          TensorsDifference("tensor", expected.tensors, got.tensors);
      !d.empty()) {
    return d;
  }
  if (std::string d = TensorsDifference("state tensor", expected.state_tensors,
                                        got.state_tensors);
      !d.empty()) {
    return d;
  }
  // Rounds of local steps change what the optimizer means (the outer one):
  // named before it.
  if (std::max(expected.sync.local_steps, 1) !=
      std::max(got.sync.local_steps, 1)) {
    return absl::StrCat("sync: job has ", SyncString(expected.sync),
                        ", worker has ", SyncString(got.sync));
  }
  if (!(expected.optimizer == got.optimizer)) {
    return absl::StrCat("optimizer: job has ",
                        OptimizerString(expected.optimizer), ", worker has ",
                        OptimizerString(got.optimizer));
  }
  if (!(expected.sync == got.sync)) {
    return absl::StrCat("sync: job has ", SyncString(expected.sync),
                        ", worker has ", SyncString(got.sync));
  }
  if (expected.sync.SemiSynchronous() &&
      !(expected.inner_optimizer == got.inner_optimizer)) {
    return absl::StrCat("inner optimizer: job has ",
                        OptimizerString(expected.inner_optimizer),
                        ", worker has ", OptimizerString(got.inner_optimizer));
  }
  if (expected.total_steps != got.total_steps) {
    return absl::StrCat("total_steps: job has ", expected.total_steps,
                        ", worker has ", got.total_steps,
                        " (different data, batch size, epochs or step limit)");
  }
  if (expected.chunk_bytes != got.chunk_bytes) {
    return absl::StrCat("chunk_bytes: job has ", expected.chunk_bytes,
                        ", worker has ", got.chunk_bytes);
  }
  return "";
}

}  // namespace lockstep
