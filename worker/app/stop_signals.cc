#include "worker/app/stop_signals.h"

#include <semaphore.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/base/exit_codes.h"
#include "worker/train/progress.h"

namespace lockstep {
namespace {

constexpr int64_t kSameStopNs = int64_t{2} * 1000 * 1000 * 1000;

// What the signal handler touches (lock-free atomics and a semaphore, as a
// handler may) and the watchdog's state. Never destroyed: the watchdog
// thread may outlive main.
struct State {
  std::atomic<bool> requested{false};
  std::atomic<int64_t> requested_ns{0};  // CLOCK_MONOTONIC.
  sem_t signalled;
  CancelToken token;
  int rank = 0;
  absl::Mutex mu;
  bool done ABSL_GUARDED_BY(mu) = false;
  std::function<absl::Status()> last_leave ABSL_GUARDED_BY(mu);
};

State* const state = new State;

int64_t MonotonicNs() {  // clock_gettime is async-signal-safe.
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1000 * 1000 * 1000 + now.tv_nsec;
}

// A plain handler rather than a sigwait thread: OpenBLAS starts its threads
// before main, so the signal may land on any thread.
void OnStopSignal(int) {
  const int64_t now = MonotonicNs();
  int64_t unset = 0;
  state->requested_ns.compare_exchange_strong(unset, now);
  if (state->requested.exchange(true)) {
    if (now - state->requested_ns.load() >= kSameStopNs) {
      std::_Exit(kExitTerminated);
    }
    return;
  }
  static const char kMessage[] =
      "lockstep_worker: stop signal received; leaving the job after this "
      "step (a step still waiting is cancelled)\n";
  ClearProgressBarForSignal();  // The message gets a line of its own.
  const ssize_t ignored = write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
  (void)ignored;
  sem_post(&state->signalled);  // Async-signal-safe.
}

// True once the run is done, waiting until `deadline` at most.
bool DoneBy(absl::Time deadline) {
  absl::MutexLock lock(&state->mu);
  state->mu.AwaitWithDeadline(absl::Condition(&state->done), deadline);
  return state->done;
}

void Watch() {
  while (sem_wait(&state->signalled) != 0) {
    if (errno != EINTR) return;
  }
  const absl::Time signalled = absl::Now();
  if (DoneBy(signalled + StopSignals::kCancelAfter)) return;
  state->token.Cancel();
  if (DoneBy(signalled + StopSignals::kExitAfter)) return;
  // Held until the exit: Done() waits here instead of the run going on.
  absl::MutexLock lock(&state->mu);
  if (state->done) return;
  std::fprintf(stderr,
               "lockstep_worker %d: still in a wait that cannot be cancelled "
               "after the stop signal; leaving the job and exiting\n",
               state->rank);
  if (state->last_leave) {
    if (absl::Status left = state->last_leave(); !left.ok()) {
      std::fprintf(stderr, "lockstep_worker %d: could not leave the job: %s\n",
                   state->rank, left.ToString().c_str());
    }
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(kExitTerminated);
}

}  // namespace

StopSignals* StopSignals::Install(int rank) {
  static StopSignals* const signals = [rank] {
    state->rank = rank;
    sem_init(&state->signalled, /*pshared=*/0, /*value=*/0);
    std::thread(Watch).detach();
    struct sigaction action {};
    action.sa_handler = OnStopSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGINT, &action, nullptr);
    sigaction(SIGTERM, &action, nullptr);
    // A peer that went away is an error on the socket (gloo's, gRPC's), not
    // a SIGPIPE that kills this process (exit 141) before it can re-form
    // its all-reduce group.
    signal(SIGPIPE, SIG_IGN);
    return new StopSignals;
  }();
  return signals;
}

const std::atomic<bool>* StopSignals::requested() const {
  return &state->requested;
}
CancelToken* StopSignals::token() { return &state->token; }

void StopSignals::SetLastLeave(std::function<absl::Status()> leave) {
  absl::MutexLock lock(&state->mu);
  state->last_leave = std::move(leave);
}

void StopSignals::Done() {
  absl::MutexLock lock(&state->mu);
  state->done = true;
  state->last_leave = nullptr;
}

}  // namespace lockstep
