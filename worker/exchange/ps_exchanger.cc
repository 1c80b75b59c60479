#include "worker/exchange/ps_exchanger.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/signature_proto.h"
#include "common/status_macros.h"

namespace lockstep {
namespace {

// The batch shards rank `rank` computes in a group of `members` (ascending)
// out of `workers` ranks: its own first, then the absent ranks' shards
// dealt out over the members in turn.
std::vector<int> CoveredShards(const std::vector<int>& members, int rank,
                               int workers) {
  std::vector<int> shards = {rank};
  const int index = static_cast<int>(
      std::find(members.begin(), members.end(), rank) - members.begin());
  int absent = 0;
  for (int r = 0; r < workers; ++r) {
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    if (absent++ % static_cast<int>(members.size()) == index) {
      shards.push_back(r);
    }
  }
  return shards;
}

}  // namespace

PsExchanger::PsExchanger(PsClient* client, int rank, Elastic elastic)
    : client_(client),
      rank_(rank),
      elastic_(std::move(elastic)),
      member_(NewGroupMemberId()) {}

absl::Status PsExchanger::JoinGroup(const ModelSignature& signature,
                                    int64_t version, absl::Duration timeout) {
  v1::ModelSignature proto;
  SignatureToProto(signature, &proto);
  GroupRequest request;
  request.group = kPsGroupName;
  request.member = member_;
  request.rank = rank_;
  request.size = elastic_.workers;
  request.version = version;
  request.min_size = elastic_.group.min_workers;
  request.settle = elastic_.group.settle;
  request.signature = proto.SerializeAsString();
  if (generation_ == 0) {
    std::printf(
        "Waiting for the worker group to form: rank %d of %d (at least %d), "
        "at the coordinator %s\n",
        rank_, elastic_.workers, elastic_.group.min_workers,
        elastic_.coordinator->address().c_str());
    std::fflush(stdout);
  }
  const absl::Duration wait = std::min(timeout, elastic_.rendezvous_timeout);
  ASSIGN_OR_RETURN(const GroupView group, elastic_.coordinator->JoinGroup(
                                              request, absl::Now() + wait));
  const bool changed =
      generation_ > 0 ||
      static_cast<int>(group.members.size()) < elastic_.workers;
  generation_ = group.generation;
  members_ = group.members;
  shards_ = CoveredShards(members_, rank_, elastic_.workers);
  client_->SetPushSlot(PushSlot{generation_, shards_.front()});
  if (changed) {
    std::printf(
        "Rank %d is in the worker group (generation %lld, %zu of %d ranks), "
        "pushing batch shard(s) %s\n",
        rank_, static_cast<long long>(generation_), members_.size(),
        elastic_.workers, absl::StrJoin(shards_, ", ").c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PsExchanger::Join(
    const ModelSignature& signature,
    const std::function<std::vector<float>()>& initial,
    absl::Span<float> weights, absl::Duration timeout) {
  sync_ = signature.sync;
  if (elastic_.coordinator != nullptr) {
    // The group first: registering after it has formed reads the version
    // it goes on from (every member's pushes wait for this one's).
    RETURN_IF_ERROR(
        JoinGroup(signature, std::max<int64_t>(seen_version_, 0), timeout));
  }
  ASSIGN_OR_RETURN(RegisterResult reg,
                   client_->Register(rank_, signature, timeout));
  if (reg.version < 0 && seen_version_ > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "a parameter server came back without the job's weights (restarted "
        "without a checkpoint, or with an empty checkpoint directory) after "
        "version ",
        seen_version_,
        "; starting over from the initial weights would discard that "
        "training. Restart the whole job, or give the servers a "
        "checkpoint directory that outlives them (docs/faults.md)"));
  }
  // In sync mode shards differ by one step at most (one has closed the
  // step the other still gathers). More, and a shard restored an older
  // checkpoint than the others hold: their steps cannot line up again.
  if (signature.sync.mode == SyncMode::kSync && reg.version >= 0 &&
      reg.newest_version > reg.version + 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the parameter-server shards are at versions ", reg.version, " to ",
        reg.newest_version,
        ": a shard restarted from an older checkpoint than the others "
        "hold. Restart every shard, from checkpoints of one version "
        "(docs/faults.md)"));
  }
  if (reg.must_initialize) {
    // Rank 0 defines version 0; everyone else receives it.
    const std::vector<float> version0 = initial();
    RETURN_IF_ERROR(client_->Initialize(version0));
  }
  // Exactly the version registered at: if some chunks have already closed
  // the step after it (a worker was lost in the middle of that step), the
  // step is recomputed from the weights it was computed from.
  ASSIGN_OR_RETURN(const int64_t version,
                   client_->Pull(std::max<int64_t>(reg.version, 0), weights,
                                 /*exact=*/true));
  seen_version_ = std::max(seen_version_, version);
  return version;
}

absl::StatusOr<int64_t> PsExchanger::Step(int64_t step,
                                          absl::Span<float> gradient,
                                          absl::Span<float> weights,
                                          const ComputeFn& compute,
                                          BatchStats* stats) {
  if (shards_.size() > 1) {
    // Covering absent ranks: every shard's gradient, then all their pushes
    // at once (each shard's barrier waits for the others).
    ASSIGN_OR_RETURN(*stats, compute(nullptr));
    std::vector<PushSlot> slots;
    for (int shard : shards_) slots.push_back(PushSlot{generation_, shard});
    ASSIGN_OR_RETURN(const int64_t version,
                     client_->PushShards(step, slots, gradient, weights));
    seen_version_ = std::max(seen_version_, version);
    return version;
  }
  RETURN_IF_ERROR(BeginStep(step, gradient, weights));
  absl::StatusOr<BatchStats> computed = compute(
      [this](int64_t begin, int64_t end) { GradientReady(begin, end); });
  if (!computed.ok()) {
    // What was not handed over is not this step's gradient (the last
    // step's, or half written): it must not be pushed. No push outlives
    // the step either way.
    AbandonStep();
    return computed.status();
  }
  absl::StatusOr<int64_t> version = FinishStep();
  *stats = *computed;
  return version;
}

absl::Status PsExchanger::Leave() {
  const bool stopped =
      elastic_.stop_requested != nullptr && elastic_.stop_requested->load();
  if (elastic_.coordinator != nullptr && !stopped && !members_.empty() &&
      members_.front() == rank_) {
    // The job is done: the ranks missing from the group that finished it
    // will not come back for it, so that the servers need not wait.
    for (int r = 0; r < elastic_.workers; ++r) {
      if (std::binary_search(members_.begin(), members_.end(), r)) continue;
      if (absl::Status left = client_->LeaveUnregistered(r); !left.ok()) {
        std::fprintf(stderr,
                     "lockstep_worker %d: could not leave for rank %d: %s\n",
                     rank_, r, left.ToString().c_str());
      }
    }
  }
  return client_->Leave();
}

absl::StatusOr<int64_t> PsExchanger::FinishStep() {
  absl::StatusOr<int64_t> version = client_->FinishStep();
  if (version.ok()) seen_version_ = std::max(seen_version_, *version);
  return version;
}

absl::StatusOr<int64_t> PsExchanger::NextStep(int64_t step,
                                              int64_t version) const {
  if (sync_.mode != SyncMode::kSync) return step + 1;  // Its own steps.
  // With backup workers a straggler may be answered with a later version;
  // its data position follows the version, so it skips the batches the
  // others already trained on.
  if (sync_.backup_workers == 0 && version != step + 1) {
    return absl::InternalError(
        absl::StrCat("step ", step, " was answered with version ", version));
  }
  return std::max(step + 1, version);
}

int64_t PsExchanger::StepAfterJoin(int64_t step, int64_t version) const {
  // Synchronous steps follow the server's version (the data order follows
  // it, so no batch is skipped or repeated); in the asynchronous modes the
  // version counts every worker's pushes and each worker walks its own
  // steps.
  return sync_.mode == SyncMode::kSync ? version : step;
}

}  // namespace lockstep
