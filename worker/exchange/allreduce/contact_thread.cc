#include "worker/exchange/allreduce/contact_thread.h"

#include <utility>
#include <vector>

#include "absl/time/clock.h"

namespace lockstep {
namespace {

// The most reports one ReportSteps carries (the server takes up to 64).
constexpr size_t kMaxPending = 64;
// How long a server that answered UNIMPLEMENTED gets pings only (it may be
// replaced by a newer one meanwhile).
constexpr absl::Duration kReportsRetry = absl::Seconds(60);

}  // namespace

ContactThread::ContactThread(CoordinatorClient* coordinator, std::string key,
                             absl::Duration every, int rank)
    : coordinator_(coordinator),
      key_(std::move(key)),
      every_(every),
      rank_(rank),
      thread_([this] { Run(); }) {}

ContactThread::~ContactThread() { Stop(); }

void ContactThread::Stop() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  std::call_once(joined_, [this] { thread_.join(); });
}

void ContactThread::Flush(absl::Duration bound) {
  Stop();
  const absl::Time deadline = absl::Now() + bound;
  const std::vector<StepReport> reports = TakePending();
  if (!reports.empty()) Send(reports, deadline).IgnoreError();
}

std::vector<StepReport> ContactThread::TakePending() {
  absl::MutexLock lock(&mu_);
  std::vector<StepReport> reports(pending_.begin(), pending_.end());
  pending_.clear();
  return reports;
}

absl::Status ContactThread::Send(const std::vector<StepReport>& reports,
                                 absl::Time deadline) {
  absl::Status sent = coordinator_->ReportSteps(rank_, reports, deadline);
  if (sent.ok()) {
    absl::MutexLock lock(&mu_);
    sent_ += static_cast<int64_t>(reports.size());
  }
  return sent;
}

void ContactThread::Report(const StepReport& report) {
  absl::MutexLock lock(&mu_);
  if (stop_) return;
  if (!reporting_) {
    if (absl::Now() < reports_off_until_) return;
    reporting_ = true;
  }
  pending_.push_back(report);
  if (pending_.size() > kMaxPending) pending_.pop_front();
}

int64_t ContactThread::reports_sent() const {
  absl::MutexLock lock(&mu_);
  return sent_;
}

void ContactThread::Run() {
  while (true) {
    const absl::Time next = absl::Now() + every_;
    const std::vector<StepReport> reports = TakePending();
    // Bounded by the tick: a coordinator away costs one tick, no more.
    if (reports.empty()) {
      coordinator_->Ping(key_, next).IgnoreError();
    } else if (absl::IsUnimplemented(Send(reports, next))) {
      // An older server, which noted no contact: a ping does.
      coordinator_->Ping(key_, next).IgnoreError();
      absl::MutexLock lock(&mu_);
      reporting_ = false;
      reports_off_until_ = absl::Now() + kReportsRetry;
      pending_.clear();
    }
    absl::MutexLock lock(&mu_);
    if (mu_.AwaitWithDeadline(absl::Condition(&stop_), next)) return;
  }
}

}  // namespace lockstep
