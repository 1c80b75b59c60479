#include "common/model/signature_proto.h"

#include "absl/strings/str_cat.h"

namespace lockstep {
namespace {

// The wire's kind of a mode; kAllReduce has none (its name is refused by
// readers, as a server refuses such a signature).
v1::SyncMode SyncModeToProto(SyncMode mode) {
  switch (mode) {
    case SyncMode::kSync:
      return v1::SYNC_MODE_SYNC;
    case SyncMode::kAsync:
      return v1::SYNC_MODE_ASYNC;
    case SyncMode::kSsp:
      return v1::SYNC_MODE_SSP;
    case SyncMode::kAllReduce:
      return v1::SYNC_MODE_UNSPECIFIED;
  }
  return v1::SYNC_MODE_UNSPECIFIED;
}

// The kind when it is set, else the name (older senders); a name that
// disagrees with the kind, or a kind this build does not know, is refused.
absl::StatusOr<SyncMode> SyncModeFromProto(const v1::SyncSpec& sync) {
  absl::StatusOr<SyncMode> named = ParseSyncMode(sync.mode());
  if (sync.kind() == v1::SYNC_MODE_UNSPECIFIED) return named;
  SyncMode kind;
  switch (sync.kind()) {
    case v1::SYNC_MODE_SYNC:
      kind = SyncMode::kSync;
      break;
    case v1::SYNC_MODE_ASYNC:
      kind = SyncMode::kAsync;
      break;
    case v1::SYNC_MODE_SSP:
      kind = SyncMode::kSsp;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown sync mode kind ", sync.kind()));
  }
  if (!named.ok()) return named.status();
  if (!sync.mode().empty() && *named != kind) {
    return absl::InvalidArgumentError(absl::StrCat("sync mode \"", sync.mode(),
                                                   "\" disagrees with kind ",
                                                   SyncModeName(kind)));
  }
  return kind;
}

void ScheduleToProto(const LrSchedule& s, v1::LrScheduleSpec* proto) {
  proto->set_kind(s.kind);
  proto->set_decay_steps(s.decay_steps);
  proto->set_decay_rate(s.decay_rate);
  proto->set_staircase(s.staircase);
  for (int64_t b : s.boundaries) proto->add_boundaries(b);
  for (double v : s.values) proto->add_values(v);
  proto->set_alpha(s.alpha);
  proto->set_warmup_steps(s.warmup_steps);
  proto->set_warmup_from(s.warmup_from);
}

// An empty kind (a sender from before schedules) is the constant rate.
LrSchedule ScheduleFromProto(const v1::LrScheduleSpec& proto) {
  LrSchedule s;
  if (!proto.kind().empty()) s.kind = proto.kind();
  s.decay_steps = proto.decay_steps();
  s.decay_rate = proto.decay_rate();
  s.staircase = proto.staircase();
  s.boundaries.assign(proto.boundaries().begin(), proto.boundaries().end());
  s.values.assign(proto.values().begin(), proto.values().end());
  s.alpha = proto.alpha();
  s.warmup_steps = proto.warmup_steps();
  s.warmup_from = proto.warmup_from();
  return s;
}

void OptimizerToProto(const OptimizerConfig& o, v1::OptimizerSpec* opt) {
  opt->set_name(o.name);
  opt->set_learning_rate(o.learning_rate);
  opt->set_momentum(o.momentum);
  opt->set_nesterov(o.nesterov);
  opt->set_beta_1(o.beta_1);
  opt->set_beta_2(o.beta_2);
  opt->set_epsilon(o.epsilon);
  opt->set_weight_decay(o.weight_decay);
  // The constant rate is the absent message: the bytes older readers know.
  if (!(o.schedule == LrSchedule())) {
    ScheduleToProto(o.schedule, opt->mutable_schedule());
  }
}

OptimizerConfig OptimizerFromProto(const v1::OptimizerSpec& opt) {
  OptimizerConfig o;
  o.name = opt.name();
  o.learning_rate = opt.learning_rate();
  o.momentum = opt.momentum();
  o.nesterov = opt.nesterov();
  o.beta_1 = opt.beta_1();
  o.beta_2 = opt.beta_2();
  o.epsilon = opt.epsilon();
  o.weight_decay = opt.weight_decay();
  o.schedule = ScheduleFromProto(opt.schedule());
  return o;
}

}  // namespace

void SignatureToProto(const ModelSignature& signature,
                      v1::ModelSignature* proto) {
  proto->Clear();
  for (const TensorInfo& t : signature.tensors) {
    v1::TensorSpec* spec = proto->add_tensors();
    spec->set_name(t.name);
    for (int64_t d : t.shape) spec->add_shape(d);
    spec->set_dtype(v1::DTYPE_FLOAT32);
  }
  for (const TensorInfo& t : signature.state_tensors) {
    v1::TensorSpec* spec = proto->add_state_tensors();
    spec->set_name(t.name);
    for (int64_t d : t.shape) spec->add_shape(d);
    spec->set_dtype(v1::DTYPE_FLOAT32);
  }
  OptimizerToProto(signature.optimizer, proto->mutable_optimizer());
  if (signature.sync.SemiSynchronous()) {
    OptimizerToProto(signature.inner_optimizer,
                     proto->mutable_inner_optimizer());
  }
  proto->set_chunk_bytes(signature.chunk_bytes);
  proto->set_num_workers(signature.num_workers);
  proto->set_num_shards(signature.num_shards);
  proto->set_total_steps(signature.total_steps);
  v1::SyncSpec* sync = proto->mutable_sync();
  sync->set_mode(SyncModeName(signature.sync.mode));
  sync->set_kind(SyncModeToProto(signature.sync.mode));
  sync->set_backup_workers(signature.sync.backup_workers);
  sync->set_staleness(signature.sync.staleness);
  if (signature.sync.SemiSynchronous()) {
    sync->set_local_steps(signature.sync.local_steps);
  }
}

absl::StatusOr<ModelSignature> SignatureFromProto(
    const v1::ModelSignature& proto) {
  ModelSignature signature;
  for (const v1::TensorSpec& spec : proto.tensors()) {
    TensorInfo t;
    t.name = spec.name();
    t.shape.assign(spec.shape().begin(), spec.shape().end());
    signature.tensors.push_back(std::move(t));
  }
  for (const v1::TensorSpec& spec : proto.state_tensors()) {
    TensorInfo t;
    t.name = spec.name();
    t.shape.assign(spec.shape().begin(), spec.shape().end());
    signature.state_tensors.push_back(std::move(t));
  }
  signature.optimizer = OptimizerFromProto(proto.optimizer());
  signature.chunk_bytes = proto.chunk_bytes();
  signature.num_workers = proto.num_workers();
  signature.num_shards = proto.num_shards() > 0 ? proto.num_shards() : 1;
  signature.total_steps = proto.total_steps();
  absl::StatusOr<SyncMode> mode = SyncModeFromProto(proto.sync());
  if (!mode.ok()) return mode.status();
  signature.sync.mode = *mode;
  signature.sync.backup_workers = proto.sync().backup_workers();
  signature.sync.staleness = proto.sync().staleness();
  signature.sync.local_steps = proto.sync().local_steps();
  if (signature.sync.SemiSynchronous()) {
    signature.inner_optimizer = OptimizerFromProto(proto.inner_optimizer());
  }
  return signature;
}

}  // namespace lockstep
