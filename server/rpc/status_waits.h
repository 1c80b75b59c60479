// Long-polled GetStatus calls (StatusRequest.wait_ms, what lockstep_ctl
// status --watch sends): each is held until its wait is over, or until the
// server finishes, and then answered with the status of that moment. So a
// watcher sees a job's final state even though its servers exit moments
// after the last worker leaves: Close() answers every held call first, and
// gives a watcher between two calls a bounded grace to come back.
// Thread-safe.
#ifndef LOCKSTEP_SERVER_RPC_STATUS_WAITS_H_
#define LOCKSTEP_SERVER_RPC_STATUS_WAITS_H_

#include <functional>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace lockstep {

class StatusWaits final {
 public:
  // The longest a call is held, whatever it asks for.
  static constexpr absl::Duration kMostWait = absl::Seconds(60);
  // A watcher answered this recently without a call held now is between
  // two calls: Close waits for its next one (within its grace).
  static constexpr absl::Duration kRecentWatcher = absl::Seconds(1);

  // Answers the call (fills its response and finishes it).
  using Answer = std::function<void()>;

  StatusWaits();
  ~StatusWaits();  // Close(ZeroDuration()).

  // Holds a call for `wait` (capped at kMostWait), then runs `answer` on
  // the thread of this object; after Close, runs it at once.
  void Hold(absl::Duration wait, Answer answer);

  // Answers every held call now and every later one at once; with none
  // held but a watcher answered within kRecentWatcher, first waits up to
  // `grace` for that watcher's next call. Returns once done.
  void Close(absl::Duration grace);

 private:
  struct Held {
    absl::Time deadline;
    Answer answer;
  };
  void Loop();
  // Takes the held calls due at `now` (all of them when closed_).
  std::vector<Answer> TakeDueLocked(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Woken() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return changed_ || closed_;
  }
  bool CameBack() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return answered_after_close_ > 0;
  }

  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
  bool changed_ ABSL_GUARDED_BY(mu_) = false;  // A call was held.
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_answer_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  int answered_after_close_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;  // Last: started once the rest exists.
};

}  // namespace lockstep

#endif  // LOCKSTEP_SERVER_RPC_STATUS_WAITS_H_
