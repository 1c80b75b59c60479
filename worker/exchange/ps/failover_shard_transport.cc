#include "worker/exchange/ps/failover_shard_transport.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace lockstep {
namespace {

// A push framed by one replica's transport, started on the same one.
struct FailoverPush final : ShardTransport::PreparedPush {
  int index = 0;
  std::unique_ptr<ShardTransport::PreparedPush> inner;
};

}  // namespace

struct FailoverShardTransport::RegisterTry {
  int rank = 0;
  ModelSignature signature;
  absl::Time deadline;
  ShardRegistration* reply = nullptr;
  StatusCallback done;
  int index = 0;  // The replica tried now.
  int tries = 0;
};

FailoverShardTransport::FailoverShardTransport(
    std::vector<std::unique_ptr<ShardTransport>> replicas,
    absl::Duration slice)
    : replicas_(std::move(replicas)), slice_(slice) {}

std::string FailoverShardTransport::Describe() const {
  std::vector<std::string> names;
  for (const auto& r : replicas_) names.push_back(r->Describe());
  return absl::StrCat(Active()->Describe(), " (of ",
                      absl::StrJoin(names, ", "), ")");
}

void FailoverShardTransport::Register(int rank,
                                      const ModelSignature& signature,
                                      absl::Time deadline,
                                      ShardRegistration* reply,
                                      StatusCallback done) {
  auto attempt = std::make_shared<RegisterTry>();
  attempt->rank = rank;
  attempt->signature = signature;
  attempt->deadline = deadline;
  attempt->reply = reply;
  attempt->done = std::move(done);
  const int n = static_cast<int>(replicas_.size());
  // After a failure there, the other replica first.
  attempt->index = (active_.load() + (active_failed_.load() ? 1 : 0)) % n;
  TryRegister(std::move(attempt));
}

void FailoverShardTransport::TryRegister(std::shared_ptr<RegisterTry> attempt) {
  const int index = attempt->index;
  const absl::Time slice_end =
      std::min(attempt->deadline, absl::Now() + slice_);
  ++attempt->tries;
  replicas_[index]->Register(
      attempt->rank, attempt->signature, slice_end, attempt->reply,
      [this, attempt, index](absl::Status s) {
        if (s.ok()) {
          active_.store(index);
          active_failed_.store(false);
          attempt->done(s);
          return;
        }
        const bool retry =
            absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s);
        if (!retry || absl::Now() >= attempt->deadline) {
          attempt->done(std::move(s));
          return;
        }
        attempt->index = (index + 1) % static_cast<int>(replicas_.size());
        TryRegister(attempt);
      });
}

ShardTransport::StatusCallback FailoverShardTransport::Noting(
    int index, StatusCallback done) {
  return [this, index, done = std::move(done)](absl::Status s) {
    if (absl::IsUnavailable(s) && index == active_.load()) {
      active_failed_.store(true);
    }
    done(std::move(s));
  };
}

ShardTransport::ReplyCallback FailoverShardTransport::NotingReply(
    int index, ReplyCallback done) {
  return [this, index, done = std::move(done)](
             const absl::Status& s,
             const absl::StatusOr<WeightsPieces>& reply) {
    if (absl::IsUnavailable(s) && index == active_.load()) {
      active_failed_.store(true);
    }
    done(s, reply);
  };
}

void FailoverShardTransport::Initialize(int rank, int64_t incarnation,
                                        int chunk,
                                        absl::Span<const float> weights,
                                        absl::Time deadline,
                                        StatusCallback done) {
  const int index = active_.load();
  replicas_[index]->Initialize(rank, incarnation, chunk, weights, deadline,
                               Noting(index, std::move(done)));
}

void FailoverShardTransport::Pull(const PullArgs& args, ReplyCallback done) {
  const int index = active_.load();
  replicas_[index]->Pull(args, NotingReply(index, std::move(done)));
}

void FailoverShardTransport::Leave(int rank, int64_t incarnation,
                                   const LeaveNote& note, absl::Time deadline,
                                   StatusCallback done) {
  const int index = active_.load();
  replicas_[index]->Leave(rank, incarnation, note, deadline,
                          Noting(index, std::move(done)));
}

void FailoverShardTransport::Average(int rank, int64_t incarnation,
                                     int64_t round, const std::string& name,
                                     absl::Span<const double> values,
                                     absl::Time deadline,
                                     std::vector<double>* mean,
                                     StatusCallback done) {
  const int index = active_.load();
  replicas_[index]->Average(rank, incarnation, round, name, values, deadline,
                            mean, Noting(index, std::move(done)));
}

void FailoverShardTransport::StepBack(int rank, int64_t incarnation,
                                      int64_t from, int64_t to,
                                      absl::Time deadline,
                                      StatusCallback done) {
  const int index = active_.load();
  replicas_[index]->StepBack(rank, incarnation, from, to, deadline,
                             Noting(index, std::move(done)));
}

absl::Status FailoverShardTransport::CheckTlsRefusal(absl::Duration timeout) {
  return Active()->CheckTlsRefusal(timeout);
}

std::unique_ptr<ShardTransport::PreparedPush>
FailoverShardTransport::PreparePush(const PushArgs& args) {
  auto push = std::make_unique<FailoverPush>();
  push->index = active_.load();
  push->inner = replicas_[push->index]->PreparePush(args);
  return push;
}

void FailoverShardTransport::StartPush(PreparedPush* push,
                                       ReplyCallback done) {
  auto* framed = static_cast<FailoverPush*>(push);
  replicas_[framed->index]->StartPush(framed->inner.get(),
                                      NotingReply(framed->index,
                                                  std::move(done)));
}

}  // namespace lockstep
