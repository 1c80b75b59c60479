#include "worker/exchange/ps/shard_membership.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/rpc/grpc_status.h"
#include "common/wire/wire_codec.h"
#include "common/wire/wire_dtype_proto.h"  // ChunkWireDType
#include "worker/exchange/ps/cancel_token.h"

namespace lockstep {
namespace ps_client_internal {
namespace {

// The fan-out every multi-call request uses: start(i, done) starts call i
// of `n` (to a shard, or for a chunk), which hands its status to `done`;
// returns every call's status once all have finished.
// Starts `n` calls and waits for all. While any is out, `still_waiting`
// (when given) is told every `every` which have not answered and for how
// long they have been waited for.
std::vector<absl::Status> StartAllAndWait(
    int n,
    const std::function<void(int, ShardTransport::StatusCallback)>& start,
    const std::function<void(const std::vector<int>&, absl::Duration)>&
        still_waiting = nullptr,
    absl::Duration every = absl::Seconds(10)) {
  std::vector<absl::Status> statuses(n);
  std::vector<bool> answered(n, false);
  absl::Mutex mu;
  int left = n;
  for (int i = 0; i < n; ++i) {
    start(i, [&, i](absl::Status s) {
      absl::MutexLock lock(&mu);
      statuses[i] = std::move(s);
      answered[i] = true;
      --left;
    });
  }
  const absl::Time begin = absl::Now();
  absl::MutexLock lock(&mu);
  const auto all_in = [&left]() { return left == 0; };
  while (!mu.AwaitWithTimeout(absl::Condition(&all_in), every)) {
    if (!still_waiting) continue;
    std::vector<int> waiting;
    for (int i = 0; i < n; ++i) {
      if (!answered[i]) waiting.push_back(i);
    }
    still_waiting(waiting, absl::Now() - begin);
  }
  return statuses;
}

// Names the request and chunk in an error, keeping the code.
absl::Status Annotate(const absl::Status& s, absl::string_view rpc, int chunk) {
  return absl::Status(
      s.code(), absl::StrCat(rpc, " of chunk ", chunk, ": ", s.message()));
}

}  // namespace

ShardMembership::ShardMembership(const PsClientOptions& options,
                                 std::vector<ShardTransport*> shards)
    : options_(options), shards_(std::move(shards)) {}

absl::StatusOr<RegisterResult> ShardMembership::Register(
    int rank, const ModelSignature& requested, absl::Duration timeout) {
  // The job's chunk size, the same in every worker: each resolves `auto`
  // from the same model and shard count.
  ModelSignature signature = requested;
  signature.chunk_bytes = ResolveChunkBytes(
      requested.chunk_bytes,
      requested.NumParameters() + requested.NumStateElements(),
      requested.num_shards);
  if (signature.num_shards != num_shards()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the signature says ", signature.num_shards, " shard(s) but ",
        num_shards(), " server address(es) were given"));
  }
  ASSIGN_OR_RETURN(
      ChunkPlan plan,
      ChunkPlan::Create(signature.NumParameters(), signature.chunk_bytes,
                        signature.num_shards, signature.NumStateElements()));
  const absl::Duration waited = std::min(timeout, options_.connect_timeout);
  const absl::Time deadline = options_.env->Now() + waited;
  std::vector<ShardRegistration> replies(num_shards());
  // A server that is not there yet (or never will be) is said so while
  // the worker waits, not only when the connect timeout ends.
  const auto say_waiting = [&](const std::vector<int>& shards,
                               absl::Duration so_far) {
    for (int shard : shards) {
      std::fprintf(
          stderr,
          "lockstep worker %d: no answer yet from shard %d at %s "
          "after %s (waiting up to %s for a lockstep_server there)\n",
          rank, shard, shards_[shard]->Describe().c_str(),
          absl::FormatDuration(absl::Trunc(so_far, absl::Seconds(1))).c_str(),
          absl::FormatDuration(waited).c_str());
    }
  };
  // A shard that answers UNAVAILABLE is starting (one with
  // --workers=auto learns the count from this call) or stopping: it is
  // asked again, after a pause, until the deadline; so is a call cut off
  // as such a shard stopped listening to start for real.
  std::vector<absl::Status> statuses(num_shards());
  std::vector<bool> ask(num_shards(), true);
  for (absl::Duration pause = absl::Milliseconds(50);;
       pause = std::min(2 * pause, absl::Seconds(1))) {
    const std::vector<absl::Status> answers = StartAllAndWait(
        num_shards(),
        [&](int shard, ShardTransport::StatusCallback done) {
          if (!ask[shard]) return done(statuses[shard]);
          shards_[shard]->Register(rank, signature, deadline, &replies[shard],
                                   std::move(done));
        },
        say_waiting);
    bool again = false;
    for (int shard = 0; shard < num_shards(); ++shard) {
      if (ask[shard]) statuses[shard] = answers[shard];
      ask[shard] = absl::IsUnavailable(statuses[shard]) ||
                   IsCutOffInTransit(statuses[shard]);
      again = again || ask[shard];
    }
    if (!again || options_.env->Now() + pause >= deadline) break;
    options_.env->SleepFor(pause);
  }
  RegisterResult result;
  incarnations_.clear();
  for (int shard = 0; shard < num_shards(); ++shard) {
    if (!statuses[shard].ok()) {
      return RegisterError(shard, statuses[shard], waited);
    }
    const ShardRegistration& reply = replies[shard];
    incarnations_.push_back(reply.incarnation);
    // Shard 0 always owns the first chunk. One that owns none is never
    // initialized and never holds a version: it says nothing of the job's.
    const bool owns = shard == 0 || plan.ShardElements(shard) > 0;
    if (owns) {
      result.must_initialize |= reply.must_initialize;
      result.version =
          shard == 0 ? reply.version : std::min(result.version, reply.version);
      result.newest_version = std::max(result.newest_version, reply.version);
    }
    result.shard_versions.push_back(reply.version);
    result.shard_checkpoints.push_back(reply.checkpoint_versions);
    result.shard_owns_chunks.push_back(owns);
  }
  result.incarnation = incarnations_[0];
  plan_ = std::move(plan);
  rank_ = rank;
  absl::MutexLock lock(&member_mu_);
  member_ = Membership{rank, incarnations_};
  return result;
}

// How long RegisterError's question to a connection may take.
constexpr absl::Duration kTlsProbe = absl::Seconds(2);

absl::Status ShardMembership::RegisterError(int shard, const absl::Status& s,
                                            absl::Duration waited) const {
  // A server that refused our TLS handshake throughout looks the same as
  // one that never came ("Deadline Exceeded"), but is permanent: ask the
  // connection why it failed.
  if (s.code() == absl::StatusCode::kDeadlineExceeded) {
    if (absl::Status refused = shards_[shard]->CheckTlsRefusal(kTlsProbe);
        !refused.ok()) {
      return absl::Status(refused.code(),
                          absl::StrCat("registering with shard ", shard, ": ",
                                       refused.message()));
    }
  }
  // Waiting for a server that never came says only "Deadline Exceeded": say
  // what was waited for, and how long.
  const std::string hint =
      s.code() == absl::StatusCode::kDeadlineExceeded
          ? absl::StrCat(" (no answer within ", absl::FormatDuration(waited),
                         ": is a lockstep_server listening there?",
                         waited == options_.connect_timeout
                             ? "; a longer connect timeout waits longer"
                             : "",
                         ")")
          : "";
  return absl::Status(s.code(), absl::StrCat("registering with shard ", shard,
                                             " at ", shards_[shard]->Describe(),
                                             ": ", s.message(), hint));
}

absl::Status ShardMembership::CheckRegistered(size_t size) const {
  if (!plan_.has_value()) {
    return absl::FailedPreconditionError("not registered with the server");
  }
  if (static_cast<int64_t>(size) != plan_->num_elements()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "vector has ", size, " values, the model has ", plan_->num_elements()));
  }
  return absl::OkStatus();
}

absl::Status ShardMembership::Initialize(absl::Span<const float> weights) {
  RETURN_IF_ERROR(CheckRegistered(weights.size()));
  const absl::Time deadline = options_.env->Now() + options_.rpc_timeout;
  const std::vector<absl::Status> statuses = StartAllAndWait(
      plan_->num_chunks(), [&](int index, ShardTransport::StatusCallback done) {
        const Chunk& chunk = plan_->chunks()[index];
        shards_[chunk.shard]->Initialize(
            rank_, incarnations_[chunk.shard], chunk.index,
            weights.subspan(chunk.offset, chunk.size), deadline,
            std::move(done));
      });
  for (const Chunk& chunk : plan_->chunks()) {
    if (!statuses[chunk.index].ok()) {
      return Annotate(statuses[chunk.index], "Initialize", chunk.index);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ShardMembership::Pull(int64_t min_version,
                                              absl::Span<float> weights,
                                              bool exact) {
  RETURN_IF_ERROR(CheckRegistered(weights.size()));
  const absl::Time deadline = options_.env->Now() + options_.rpc_timeout;
  std::vector<absl::Status> decoded(plan_->num_chunks());
  std::vector<int64_t> versions(plan_->num_chunks());
  const std::vector<absl::Status> statuses = StartAllAndWait(
      plan_->num_chunks(), [&](int index, ShardTransport::StatusCallback done) {
        const Chunk& chunk = plan_->chunks()[index];
        PullArgs args{rank_,       incarnations_[chunk.shard],
                      chunk.index, min_version,
                      exact,       ChunkWireDType(chunk, options_.wire_dtype),
                      deadline};
        const absl::Span<float> out = weights.subspan(chunk.offset, chunk.size);
        shards_[chunk.shard]->Pull(
            args, [&, index, out, dtype = args.dtype, done = std::move(done)](
                      const absl::Status& status,
                      const absl::StatusOr<WeightsPieces>& reply) {
              if (status.ok()) {
                decoded[index] = reply.ok()
                                     ? DecodePieces(reply->data, dtype, out)
                                     : reply.status();
                if (reply.ok()) versions[index] = reply->version;
              }
              done(status);
            });
      });
  int64_t version = -1;
  for (const Chunk& chunk : plan_->chunks()) {
    if (!statuses[chunk.index].ok()) {
      return Annotate(statuses[chunk.index], "Pull", chunk.index);
    }
    RETURN_IF_ERROR(decoded[chunk.index]);
    // Chunks advance independently; a caller wanting one consistent version
    // passes it as min_version, and all chunks then hold at least it.
    version = version < 0 ? versions[chunk.index]
                          : std::min(version, versions[chunk.index]);
  }
  return version;
}

absl::StatusOr<std::vector<double>> ShardMembership::Average(
    const std::string& name, absl::Span<const double> values,
    absl::Duration timeout) {
  if (!plan_.has_value()) {
    return absl::FailedPreconditionError("average: not in a job yet");
  }
  std::vector<double> mean;
  absl::Status status;
  shards_[0]->Average(rank_, incarnations_[0], average_round_, name, values,
                      options_.env->Now() + timeout, &mean,
                      [&status](absl::Status s) { status = std::move(s); });
  RETURN_IF_ERROR(status);
  ++average_round_;
  return mean;
}

absl::Status ShardMembership::StepBack(int shard, int64_t from, int64_t to) {
  if (!plan_.has_value() || shard < 0 || shard >= num_shards()) {
    return absl::FailedPreconditionError("step back: not in a job yet");
  }
  absl::Status status;
  shards_[shard]->StepBack(
      rank_, incarnations_[shard], from, to,
      options_.env->Now() + options_.rpc_timeout,
      [&status](absl::Status s) { status = std::move(s); });
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat("shard ", shard, " at ",
                                                  shards_[shard]->Describe(),
                                                  ": ", status.message()));
}

absl::Status ShardMembership::Leave(const LeaveNote& note) {
  if (!plan_.has_value()) return absl::OkStatus();
  return LeaveAs(rank_, incarnations_, note);
}

absl::Status ShardMembership::LeaveFromAnyThread() {
  absl::ReleasableMutexLock lock(&member_mu_);
  if (member_.rank < 0) return absl::OkStatus();
  const Membership member = member_;
  lock.Release();
  return LeaveAs(member.rank, member.incarnations,
                 LeaveNote{LeaveReason::kStopped, ""});
}

absl::Status ShardMembership::LeaveAs(int rank,
                                      const std::vector<int64_t>& incarnations,
                                      const LeaveNote& note) {
  const absl::Time deadline = CancelToken::LeaveDeadline(
      options_.cancel, options_.env->Now() + options_.rpc_timeout);
  absl::Status result;
  for (const absl::Status& s : StartAllAndWait(
           num_shards(), [&](int shard, ShardTransport::StatusCallback done) {
             shards_[shard]->Leave(rank, incarnations[shard], note, deadline,
                                   std::move(done));
           })) {
    result.Update(s);
  }
  return result;
}

}  // namespace ps_client_internal
}  // namespace lockstep
