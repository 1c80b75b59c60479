#include "server/daemon/job_watchdog.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/exit_codes.h"

namespace lockstep {
namespace {

std::string Ranks(const std::vector<int>& ranks) {
  return absl::StrJoin(ranks, ",");
}

}  // namespace

JobWatchdog::JobWatchdog(const Options& options, ParameterServer* core,
                         Checkpointer* checkpointer, WeightsFileWriter* weights,
                         DaemonLog log, const ContactClock* coordinator)
    : options_(options),
      core_(core),
      checkpointer_(checkpointer),
      weights_(weights),
      log_(std::move(log)),
      coordinator_(coordinator) {}

void JobWatchdog::ReportFailures() {
  // Only the failures of now are kept: a rank replaced since is no longer
  // failed, so its next failure is news.
  std::map<int, std::string> failed;
  for (const auto& [rank, note] : core_->FailedRanks()) {
    failed[rank] = note.detail;
    auto said = reported_.find(rank);
    if (said != reported_.end() && said->second == note.detail) continue;
    log_(absl::StrCat("rank ", rank, " left the job saying it failed: ",
                      note.detail.empty() ? "(no detail)" : note.detail,
                      "; the job goes on waiting for a replacement of it, "
                      "and fails at its end if none registers"));
  }
  reported_ = std::move(failed);
}

std::optional<int> JobWatchdog::CheckStepTimeouts(absl::Time now) {
  ReportFailures();
  if (options_.step_timeout <= absl::ZeroDuration()) return std::nullopt;
  const bool fail = options_.fail_on_worker_loss;
  for (const ParameterServer::StepAlarm& alarm :
       core_->CheckStepTimeout(now, options_.step_timeout, fail)) {
    if (!alarm.expired) {
      log_(absl::StrCat("warning: step ", alarm.step, " has waited ",
                        absl::FormatDuration(alarm.waited), " for rank(s) ",
                        Ranks(alarm.missing)));
      continue;
    }
    if (alarm.ssp && !fail) {
      log_(absl::StrCat(
          "ssp: rank(s) ", Ranks(alarm.missing), " have not pushed step ",
          alarm.step, " in ", absl::FormatDuration(alarm.waited),
          "; evicted: the others go on without waiting for them, which are "
          "waited for again once they have rejoined and caught up "
          "(--on_worker_loss=fail would end the job instead)"));
      continue;
    }
    log_(absl::StrCat("step ", alarm.step, " timed out waiting for rank(s) ",
                      Ranks(alarm.missing), alarm.ssp ? "" : "; not applied",
                      fail ? "; failing the job (--on_worker_loss=fail)"
                           : "; waiting for a replacement"));
    if (fail) {
      core_->Shutdown(absl::CancelledError(
          absl::StrCat("the job failed: rank(s) ", Ranks(alarm.missing),
                       " were lost (--on_worker_loss=fail)")));
      return kExitRetryable;
    }
  }
  return std::nullopt;
}

absl::Time JobWatchdog::LatestContact() const {
  absl::Time last = absl::InfinitePast();
  for (const WorkerActivity& w : core_->GetStatus().workers) {
    last = std::max(last, w.last_contact);
  }
  // All-reduce ranks call only the coordinator while they train.
  if (coordinator_ != nullptr) last = std::max(last, coordinator_->Latest());
  return last;
}

std::optional<int> JobWatchdog::CheckWorkersGone(absl::Time now) {
  // A shard that owns no chunk hears from workers only when they register
  // and leave: its quiet says nothing of them (the other shards judge).
  if (options_.no_worker_timeout <= absl::ZeroDuration() ||
      core_->WaitUntilDone(absl::ZeroDuration()) ||
      core_->GetStatus().OwnsNoChunk()) {
    return std::nullopt;
  }
  const absl::Time last = LatestContact();
  // Before the first call the job has not begun: workers may be slow to
  // start (pods pending), and nothing would be lost.
  if (last == absl::InfinitePast() || now - last < options_.no_worker_timeout) {
    return std::nullopt;
  }
  log_(absl::StrCat("no worker has called for ",
                    absl::FormatDuration(now - last),
                    " (--no_worker_timeout_s) and the job is unfinished: "
                    "every worker was lost and none replaced; exiting "
                    "retryable"));
  if (checkpointer_ != nullptr) {
    if (absl::Status saved = checkpointer_->SaveUnsaved(); !saved.ok()) {
      log_(
          absl::StrCat("checkpoint before exiting failed: ", saved.ToString()));
    }
  }
  core_->Shutdown(absl::UnavailableError(
      "the server gave up on the job: no worker called for too long"));
  return kExitRetryable;
}

std::optional<int> JobWatchdog::FinishIfDone() {
  if (!options_.exit_when_done || !core_->WaitUntilDone(absl::ZeroDuration())) {
    return std::nullopt;
  }
  // Leaves alone do not end a job that never began: a Leave of incarnation
  // 0 names a rank that never registered (an all-reduce rank, which calls
  // the coordinator first), so leaves with no call before them are stray
  // or forged.
  if (LatestContact() == absl::InfinitePast()) return std::nullopt;
  // A rank that failed (and was not replaced) fails the job, after its
  // model is saved like any other's.
  const std::vector<std::pair<int, LeaveNote>> failed = core_->FailedRanks();
  std::string failures;
  for (const auto& [rank, note] : failed) {
    absl::StrAppend(&failures, failures.empty() ? "" : "; ", "rank ", rank,
                    ": ", note.detail.empty() ? "(no detail)" : note.detail);
  }
  log_(failed.empty() ? "every worker has left"
                      : absl::StrCat("every worker has left, but the job "
                                     "failed: ",
                                     failures));
  // The trained model is saved whatever the interval.
  if (checkpointer_ != nullptr) {
    if (absl::Status saved = checkpointer_->SaveUnsaved(); !saved.ok()) {
      log_(absl::StrCat("final checkpoint failed: ", saved.ToString()));
      return kExitFailure;
    }
  }
  if (weights_ != nullptr) {
    if (absl::StatusOr<int64_t> v = weights_->Write(); !v.ok()) {
      log_(absl::StrCat("writing the weights file failed: ",
                        v.status().ToString()));
      return kExitFailure;
    }
  }
  return failed.empty() ? kExitOk : kExitFailure;
}

}  // namespace lockstep
