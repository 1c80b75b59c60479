// One thread that runs a worker's push work -- encoding gradient chunks and
// starting their RPCs -- in the order it was handed over, so that the
// training thread only hands it over. On a GPU the training thread queues
// the backward pass's kernels; each millisecond it spends encoding or
// starting a push is one more the GPU may idle (measured on an H200 with
// ResNet-50: 4 to 35 ms of a step, see docs/benchmarks.md). One thread, not
// a pool: the pushes must start in the order backprop readied their chunks,
// the same on every worker, or the push windows can wait on each other
// (worker/exchange/ps/push_step.h).
//
// A SerialExecutor (common/base/serial_executor.h) with no bound that matters
// runs the work; PushThread adds only WaitIdle.
//
// Thread-safe.
#ifndef LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_THREAD_H_
#define LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_THREAD_H_

#include <functional>

#include "common/base/serial_executor.h"

namespace lockstep {

class PushThread {
 public:
  PushThread();
  // Runs what was submitted, then joins.
  ~PushThread() = default;
  PushThread(const PushThread&) = delete;
  PushThread& operator=(const PushThread&) = delete;

  // Runs `work` after everything submitted before it.
  void Submit(std::function<void()> work);
  // Returns once everything submitted so far has run to its end (and what
  // it held is gone). Not from inside submitted work.
  void WaitIdle();

 private:
  SerialExecutor executor_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_EXCHANGE_PS_PUSH_THREAD_H_
