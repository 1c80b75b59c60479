// Keeps an all-reduce rank in touch with the coordinator while it trains:
// a thread that pings it (CoordinatorClient::Ping) every `every`. A rank
// that trains calls nothing else at the server, whose --no_worker_timeout_s
// counts coordinator calls as worker contact (server/coordination/
// contact_clock.h): without the pings a healthy job longer than the timeout
// would be given up, and with no call counted a job whose ranks were all
// lost would never be. A ping that fails (the coordinator away) is only
// tried again at the next tick: training does not depend on it.
//
// Thread-safe; the destructor stops the thread.
#ifndef LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_
#define LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_

#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/exchange/allreduce/coordinator_client.h"

namespace lockstep {

class ContactThread final {
 public:
  // Pings `coordinator` (not owned; outlives this) with `key` now and
  // every `every` after.
  ContactThread(CoordinatorClient* coordinator, std::string key,
                absl::Duration every);
  ~ContactThread();

  ContactThread(const ContactThread&) = delete;
  ContactThread& operator=(const ContactThread&) = delete;

 private:
  void Run();

  CoordinatorClient* const coordinator_;
  const std::string key_;
  const absl::Duration every_;
  absl::Mutex mu_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // Last: starts once the rest is set.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_ALLREDUCE_CONTACT_THREAD_H_
