// Keeps an all-reduce rank in touch with the coordinator while it trains:
// a thread that calls it every `every`. A rank that trains calls nothing
// else at the server, whose --no_worker_timeout_s counts coordinator calls
// as worker contact (server/coordination/contact_clock.h): without them a
// healthy job longer than the timeout would be given up, and with no call
// counted a job whose ranks were all lost would never be. Each tick carries
// the rank's reports of its steps since the last one (ReportSteps), for the
// server's straggler verdict, or pings (CoordinatorClient::Ping) when there
// are none or the server predates reports (tried again each minute). A
// call that fails (the coordinator away) is only tried again at the next
// tick, its reports dropped: training does not depend on it. A rank that
// leaves sends what its last tick did not carry with Flush.
//
// Thread-safe; the destructor stops the thread.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_

#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/rpc/step_report.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {

class ContactThread final {
 public:
  // Calls `coordinator` (not owned; outlives this) now and every `every`
  // after, pinging with `key` or reporting as `rank`.
  ContactThread(CoordinatorClient* coordinator, std::string key,
                absl::Duration every, int rank);
  ~ContactThread();

  ContactThread(const ContactThread&) = delete;
  ContactThread& operator=(const ContactThread&) = delete;

  // Sends `report` with the next tick; past the most one call carries,
  // the oldest pending one is dropped.
  void Report(const StepReport& report);

  // Stops the ticks (waiting out one under way) and then sends the reports
  // still pending, for at most `bound` (a rank leaving: the last second of
  // its steps would be lost otherwise). Report after Flush drops its
  // report.
  void Flush(absl::Duration bound);

  // Reports sent and accepted so far (for tests).
  int64_t reports_sent() const;

 private:
  void Run();
  // Ends the thread, once.
  void Stop();
  // Takes the reports waiting for a tick.
  std::vector<StepReport> TakePending();
  // Sends `reports`, counting them as sent once accepted.
  absl::Status Send(const std::vector<StepReport>& reports,
                    absl::Time deadline);

  CoordinatorClient* const coordinator_;
  const std::string key_;
  const absl::Duration every_;
  const int rank_;
  mutable absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<StepReport> pending_ ABSL_GUARDED_BY(mu_);
  // False once the coordinator answered UNIMPLEMENTED: pings only, until
  // reports_off_until_ (then reports are tried again).
  bool reporting_ ABSL_GUARDED_BY(mu_) = true;
  absl::Time reports_off_until_ ABSL_GUARDED_BY(mu_);
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  std::once_flag joined_;  // Flush and the destructor join thread_ once.
  std::thread thread_;     // Last: starts once the rest is set.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_
