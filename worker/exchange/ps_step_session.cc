#include "worker/exchange/ps_step_session.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"
#include "common/model/signature_proto.h"

namespace lockstep {
namespace {

// The batch shards rank `rank` computes in a group of `members` (ascending)
// out of `workers` ranks: its own, then absent ranks' dealt out in turn.
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

void LeaveForAbsentRanks(PsClient* client, const std::vector<int>& members,
                         int workers, const std::string& who) {
  for (int r = 0; r < workers; ++r) {
    if (std::binary_search(members.begin(), members.end(), r)) continue;
    if (absl::Status left = client->LeaveUnregistered(r); !left.ok()) {
      std::fprintf(stderr, "%s: could not leave for rank %d: %s\n", who.c_str(),
                   r, left.ToString().c_str());
    }
  }
}

PsStepSession::PsStepSession(const StepSessionOptions& options,
                             std::unique_ptr<PsClient> client,
                             std::unique_ptr<CoordinatorClient> coordinator)
    : rank_(options.rank),
      workers_(options.num_workers),
      group_(options.group),
      rendezvous_timeout_(options.client.connect_timeout),
      group_wait_(options.rejoin_timeout),
      client_(std::move(client)),
      coordinator_(std::move(coordinator)),
      recovery_(options),
      member_(NewGroupMemberId()) {}

PsStepSession::~PsStepSession() {
  // An unfinished step's pushes reference the buffers: end it first.
  if (in_step_ && streamed_) client_->AbandonStep();
  watch_.Stop();
}

absl::Status PsStepSession::JoinGroup(int64_t version, absl::Duration timeout) {
  v1::ModelSignature proto;
  SignatureToProto(signature_, &proto);
  GroupRequest request;
  request.group = kPsGroupName;
  request.member = member_;
  request.rank = rank_;
  request.size = workers_;
  request.version = version;
  request.min_size = group_.min_workers;
  request.settle = group_.settle;
  request.signature = proto.SerializeAsString();
  // Fewer than every rank form a group only as a majority of those alive:
  // joiners wait for members at work (their watch_ is open).
  request.quorum = true;
  watch_.Stop();
  if (generation_ == 0) {
    std::printf(
        "Waiting for the worker group to form: rank %d of %d (at least %d), "
        "at the coordinator %s\n",
        rank_, workers_, group_.min_workers, coordinator_->address().c_str());
    std::fflush(stdout);
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<GroupView> joined = coordinator_->JoinGroup(
      request, start + std::min(timeout, rendezvous_timeout_));
  // A joiner waits for the members to finish the step (or the round of
  // local steps) under way, which may outlast the connect timeout: on
  // while the coordinator answers, up to the rejoin timeout.
  const absl::Time give_up =
      start + std::min(timeout, std::max(rendezvous_timeout_, group_wait_));
  while (
      absl::IsDeadlineExceeded(joined.status()) && absl::Now() < give_up &&
      coordinator_->Ping(kPsGroupName, absl::Now() + absl::Seconds(2)).ok()) {
    joined = coordinator_->JoinGroup(
        request, std::min(give_up, absl::Now() + rendezvous_timeout_));
  }
  ASSIGN_OR_RETURN(const GroupView group, std::move(joined));
  const bool changed =
      generation_ > 0 || static_cast<int>(group.members.size()) < workers_;
  generation_ = group.generation;
  members_ = group.members;
  watch_.Start(kPsGroupName, generation_, rank_, group_.watch_poll, nullptr);
  shards_ = CoveredShards(members_, rank_, workers_);
  client_->SetPushSlot(PushSlot{generation_, shards_.front(), report_});
  if (changed) {
    std::printf(
        "Rank %d is in the worker group (generation %lld, %zu of %d ranks), "
        "pushing batch shard(s) %s\n",
        rank_, static_cast<long long>(generation_), members_.size(), workers_,
        absl::StrJoin(shards_, ", ").c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> PsStepSession::Join(const ModelSignature& signature,
                                                InitialFn initial,
                                                absl::Span<float> weights,
                                                absl::Span<float> gradient,
                                                absl::Duration timeout) {
  if (in_step_) return absl::FailedPreconditionError("Join during a step");
  RETURN_IF_ERROR(CheckSessionBuffers(signature, weights, gradient));
  signature_ = signature;
  initial_ = std::move(initial);
  weights_ = weights;
  if (gradient.empty()) {
    own_gradient_.resize(weights.size());
    gradient = absl::MakeSpan(own_gradient_);
  }
  gradient_ = gradient;
  ASSIGN_OR_RETURN(StepOutcome joined, JoinOnce(timeout));
  RETURN_IF_ERROR(CheckNotPastEnd(signature_, joined));
  recovery_.StepSucceeded();  // The rejoin deadline counts from here.
  RestartClock();
  return joined;
}

absl::StatusOr<StepOutcome> PsStepSession::JoinOnce(absl::Duration timeout) {
  if (coordinator_ != nullptr) {
    // The group first: registering after it has formed reads the version
    // it goes on from (every member's pushes wait for this one's).
    RETURN_IF_ERROR(JoinGroup(std::max<int64_t>(seen_version_, 0), timeout));
  }
  ASSIGN_OR_RETURN(RegisterResult reg,
                   client_->Register(rank_, signature_, timeout));
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
  // checkpoint than the others hold: they go back to a version they all
  // hold.
  if (Synchronous() && reg.version >= 0 &&
      reg.newest_version > reg.version + 1) {
    ASSIGN_OR_RETURN(reg, StepBackShards(std::move(reg), timeout));
  }
  if (reg.must_initialize) {
    // Rank 0 defines version 0; everyone else receives it.
    RETURN_IF_ERROR(client_->Initialize(initial_()));
  }
  // Exactly the version registered at: if some chunks have already closed
  // the step after it (a worker was lost in the middle of that step), the
  // step is recomputed from the weights it was computed from.
  ASSIGN_OR_RETURN(version_,
                   client_->Pull(std::max<int64_t>(reg.version, 0), weights_,
                                 /*exact=*/true));
  seen_version_ = std::max(seen_version_, version_);
  next_step_ = PsStepAfterJoin(signature_.sync, next_step_, version_);
  StepOutcome joined;
  joined.version = version_;
  joined.next_step = next_step_;
  return joined;
}

absl::StatusOr<RegisterResult> PsStepSession::StepBackShards(
    RegisterResult reg, absl::Duration timeout) {
  // A few rounds: another rank's step back may come first (ours is then
  // refused as stale, and the next registration finds the shards level).
  constexpr int kRounds = 4;
  for (int round = 0; round < kRounds; ++round) {
    if (reg.version < 0 || reg.newest_version <= reg.version + 1) return reg;
    const std::string apart = absl::StrCat(
        "the parameter-server shards are at versions ", reg.version, " to ",
        reg.newest_version,
        ": a shard restarted from an older checkpoint than the others hold");
    const size_t shards = reg.shard_versions.size();
    // The newest checkpoint every shard that owns a chunk holds, at or
    // before the oldest's version.
    int64_t common = -1;
    for (int64_t v : reg.shard_checkpoints.empty() ? std::vector<int64_t>()
                                                   : reg.shard_checkpoints[0]) {
      if (v > reg.version || v <= common) continue;
      bool everywhere = true;
      for (size_t s = 1; s < shards && everywhere; ++s) {
        const std::vector<int64_t>& held = reg.shard_checkpoints[s];
        everywhere = !reg.shard_owns_chunks[s] ||
                     std::find(held.begin(), held.end(), v) != held.end();
      }
      if (everywhere) common = v;
    }
    if (common < 0) {
      std::string held;
      for (size_t s = 0; s < shards; ++s) {
        absl::StrAppend(&held, s == 0 ? "" : "; ", "shard ", s, ": ",
                        !reg.shard_owns_chunks[s] ? "owns no chunk"
                        : reg.shard_checkpoints[s].empty()
                            ? "none"
                            : absl::StrJoin(reg.shard_checkpoints[s], ","));
      }
      return absl::FailedPreconditionError(absl::StrCat(
          apart, ", and they hold no checkpoint of one version to go back to (",
          held,
          "). Restart every shard, from checkpoints of one version "
          "(docs/faults.md)"));
    }
    std::fprintf(stderr,
                 "lockstep worker %d: %s; stepping the shards back to version "
                 "%lld, the newest they all hold\n",
                 rank_, apart.c_str(), static_cast<long long>(common));
    for (size_t s = 0; s < shards; ++s) {
      if (reg.shard_versions[s] <= common) continue;  // Or it owns none.
      const absl::Status stepped =
          client_->StepBack(static_cast<int>(s), reg.shard_versions[s], common);
      // ABORTED: another rank stepped it back first.
      if (!stepped.ok() && !absl::IsAborted(stepped)) {
        return absl::FailedPreconditionError(
            absl::StrCat(apart, "; stepping back to version ", common,
                         " failed: ", stepped.message()));
      }
    }
    ASSIGN_OR_RETURN(reg, client_->Register(rank_, signature_, timeout));
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "the parameter-server shards stayed at versions ", reg.version, " to ",
      reg.newest_version, " after ", kRounds, " steps back"));
}

absl::StatusOr<StepPlan> PsStepSession::BeginStep() {
  if (weights_.empty())
    return absl::FailedPreconditionError("step before Join");
  if (in_step_) {
    return absl::FailedPreconditionError(
        "a step is under way; finish or abandon it first");
  }
  // In rounds of local steps (LocalSGD, DiLoCo) this step is a round's
  // last, and the round's other steps were progress made without the
  // servers: the rejoin deadline moves on by their time, so that a round
  // longer than it can still register again after its push fails (a
  // regroup, a restarted server); and the step's own phases start here
  // (the round's other steps come as WorkBefore, not as its input).
  if (signature_.sync.SemiSynchronous()) {
    recovery_.Progressed();
    RestartClock();
  }
  const size_t n = weights_.size();
  StepPlan plan;
  plan.step = next_step_;
  plan.batch_shards = shards_;
  plan.sum_shards_locally = false;  // The servers' barriers count shards.
  plan.streams = shards_.size() == 1;
  if (plan.streams) {
    plan.gradient = gradient_;
  } else {
    shards_gradient_.resize(n * shards_.size());
    plan.gradient = absl::MakeSpan(shards_gradient_);
  }
  if (plan.streams) {
    RETURN_IF_ERROR(client_->BeginStep(plan.step, plan.gradient, weights_));
  }
  in_step_ = true;
  streamed_ = plan.streams;
  return plan;
}

void PsStepSession::GradientReady(int64_t begin, int64_t end) {
  if (!in_step_ || !streamed_) return;
  const absl::Time start = absl::Now();
  client_->GradientReady(begin, end);
  clock_.Pushed(absl::Now() - start);
}

absl::StatusOr<int64_t> PsStepSession::Exchange() {
  if (streamed_) return client_->FinishStep();
  // Covering absent ranks: every shard's gradient, then all their pushes
  // at once (each shard's barrier waits for the others).
  std::vector<PushSlot> slots;
  for (int shard : shards_) {
    slots.push_back(PushSlot{generation_, shard, report_});
  }
  return client_->PushShards(next_step_, slots, shards_gradient_, weights_);
}

absl::StatusOr<StepOutcome> PsStepSession::FinishStep() {
  if (!in_step_) return absl::FailedPreconditionError("no step begun");
  clock_.Finishing(absl::Now());
  absl::StatusOr<int64_t> version = Exchange();
  in_step_ = false;
  if (!version.ok()) {
    absl::StatusOr<StepOutcome> after = recovery_.AfterFailure(
        version.status(), /*can_rejoin=*/true,
        [this](absl::Duration timeout) { return JoinOnce(timeout); });
    RestartClock();  // A rejoin's time is no phase of a step.
    return after;
  }
  // The next step's pushes say how this one went.
  const StepTimings timings = client_->step_timings();
  report_ = clock_.Finished(
      next_step_, absl::Now(),
      absl::Seconds(timings.encode_seconds + timings.send_seconds -
                    timings_at_start_.encode_seconds -
                    timings_at_start_.send_seconds));
  timings_at_start_ = timings;
  client_->SetStepReport(report_);
  seen_version_ = std::max(seen_version_, *version);
  ASSIGN_OR_RETURN(const int64_t next,
                   NextPsStep(signature_.sync, next_step_, *version));
  recovery_.StepSucceeded();
  version_ = *version;
  next_step_ = next;
  StepOutcome done;
  done.applied = true;
  done.version = version_;
  done.next_step = next_step_;
  return done;
}

void PsStepSession::RestartClock() {
  clock_.Restart(absl::Now());
  timings_at_start_ = client_->step_timings();
}

absl::Status PsStepSession::AbandonStep() {
  if (!in_step_) return absl::OkStatus();
  in_step_ = false;
  // What was not handed over is not this step's gradient (the last
  // step's, or half written): it must not be pushed. No push outlives the
  // step either way.
  if (streamed_) client_->AbandonStep();
  RestartClock();  // Its phases are no step's.
  if (!streamed_) return absl::OkStatus();
  // Replies to what was pushed may have written parts of the next version
  // into the weights: read them again at the version the job is at, so
  // every tensor is of one version.
  ASSIGN_OR_RETURN(version_, client_->Pull(std::max<int64_t>(version_, 0),
                                           weights_, Synchronous()));
  return absl::OkStatus();
}

absl::StatusOr<int64_t> NextPsStep(const SyncPolicy& sync, int64_t step,
                                   int64_t version) {
  if (sync.mode != SyncMode::kSync) return step + 1;  // Its own steps.
  // With backup workers a straggler may be answered with a later version;
  // its data position follows the version, so it skips the batches the
  // others already trained on.
  if (sync.backup_workers == 0 && version != step + 1) {
    return absl::InternalError(
        absl::StrCat("step ", step, " was answered with version ", version));
  }
  return std::max(step + 1, version);
}

int64_t PsStepAfterJoin(const SyncPolicy& sync, int64_t step, int64_t version) {
  return sync.mode == SyncMode::kSync ? version : step;
}

absl::Status PsStepSession::Leave(const LeaveNote& note) {
  if (coordinator_ != nullptr) {
    watch_.Stop();
    // The others need not wait out the quorum's grace for this rank.
    coordinator_
        ->LeaveGroup(kPsGroupName, rank_, absl::Now() + absl::Milliseconds(500))
        .IgnoreError();
  }
  if (coordinator_ != nullptr && !recovery_.StopRequested() &&
      !members_.empty() && members_.front() == rank_) {
    // The job is done: the ranks missing from the group that finished it
    // will not come back for it.
    LeaveForAbsentRanks(client_.get(), members_, workers_,
                        absl::StrCat("lockstep_worker ", rank_));
  }
  return client_->Leave(note);
}

absl::Status PsStepSession::LeaveFromAnyThread() {
  return client_->LeaveFromAnyThread();
}

}  // namespace lockstep
