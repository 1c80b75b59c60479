#include "server/daemon/standby_follower.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/rpc/grpc_status.h"
#include "common/security/tls.h"
#include "grpcpp/grpcpp.h"
#include "lockstep/v1/replication.grpc.pb.h"
#include "server/daemon/standby_state.h"

namespace lockstep {
namespace {

// Between failed calls, while the primary may still answer.
constexpr absl::Duration kRetry = absl::Milliseconds(50);

// A refusal that waiting will not change.
bool Permanent(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsPermissionDenied(s) ||
         absl::IsUnauthenticated(s) || absl::IsUnimplemented(s) ||
         absl::IsInvalidArgument(s);
}

}  // namespace

absl::StatusOr<StandbyEnd> FollowPrimary(const StandbyOptions& options,
                                         absl::Notification* stop,
                                         const DaemonLog& log) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      MakeChannel(options.primary, options.tls);
  if (!channel.ok()) return channel.status();
  std::unique_ptr<v1::Replication::Stub> stub =
      v1::Replication::NewStub(*channel);
  StandbyEnd end;
  StandbyState held;
  int64_t sequence = 0;  // Of the newest state held.
  absl::Time last_answer = absl::Now();
  bool said_unreachable = false;
  bool primary_answers = false;
  std::optional<bool> sending_on;
  const auto tell_workers = [&]() {
    const bool send_on = primary_answers || held.empty();
    if (send_on != sending_on && options.send_workers_on) {
      options.send_workers_on(send_on);
    }
    sending_on = send_on;
  };
  tell_workers();
  while (!stop->HasBeenNotified()) {
    grpc::ClientContext context;
    // Long enough for the primary's longest wait, short enough to see it
    // lost within the failover timeout.
    context.set_deadline(absl::ToChronoTime(
        absl::Now() + std::max(options.failover_timeout, absl::Seconds(1))));
    v1::FollowRequest request;
    request.set_held_version(held.version());
    request.set_held_sequence(sequence);
    request.set_standby(options.self);
    v1::FollowResponse response;
    const absl::Status called =
        FromGrpcStatus(stub->Follow(&context, request, &response));
    const absl::Time now = absl::Now();
    if (called.ok() != primary_answers) {
      primary_answers = called.ok();
      tell_workers();
    }
    if (called.ok()) {
      last_answer = now;
      said_unreachable = false;
      if (response.job_done()) {
        end.kind = StandbyEnd::kJobDone;
        return end;
      }
      if (!response.checkpoint().empty()) {
        absl::StatusOr<ShardCheckpoint> state =
            DecodeCheckpoint(response.checkpoint());
        if (!state.ok()) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the primary ", options.primary,
              " sent a damaged state: ", state.status().message()));
        }
        if (state->shard != options.shard ||
            state->num_shards != options.num_shards) {
          return absl::FailedPreconditionError(absl::StrCat(
              "the primary ", options.primary, " is shard ", state->shard,
              " of ", state->num_shards, ", this standby shard ", options.shard,
              " of ", options.num_shards));
        }
        if (held.empty()) {
          log(absl::StrCat("standby of ", options.primary, ": holds version ",
                           state->version));
        }
        held.Update(*std::move(state));
        sequence = response.sequence();
        tell_workers();
      }
      continue;
    }
    if (Permanent(called)) {
      return absl::FailedPreconditionError(
          absl::StrCat("the primary ", options.primary,
                       " refused to be followed: ", called.ToString()));
    }
    if (now - last_answer >= options.failover_timeout) {
      if (!held.empty()) {
        absl::StatusOr<ShardCheckpoint> state = held.TakeOver();
        if (!state.ok()) {
          return absl::InternalError(absl::StrCat(
              "the primary ", options.primary, " is lost and this standby ",
              "cannot take over: ", state.status().message()));
        }
        end.kind = StandbyEnd::kTakeOver;
        end.state = *std::move(state);
        end.primary_lost = last_answer;
        log(absl::StrCat(
            "the primary ", options.primary, " has not answered for ",
            absl::FormatDuration(now - last_answer), " (", called.ToString(),
            "): taking over at version ", end.state->version));
        return end;
      }
      if (!said_unreachable) {
        log(absl::StrCat("standby of ", options.primary,
                         ": no state yet, and the primary does not answer (",
                         called.ToString(), "); waiting for it"));
        said_unreachable = true;
      }
    }
    stop->WaitForNotificationWithTimeout(kRetry);
  }
  end.kind = StandbyEnd::kStopped;
  return end;
}

}  // namespace lockstep
