// What a worker says about its own last step, carried on its pushes
// (PushRequest.report_*), so that a parameter-server shard can tell a rank
// that computes slowly from one whose gradient travels slowly
// (docs/operations.md, "Stragglers").
#ifndef LOCKSTEP_COMMON_RPC_STEP_REPORT_H_
#define LOCKSTEP_COMMON_RPC_STEP_REPORT_H_

#include <cstdint>

namespace lockstep {

// The phases of the worker's step `step`, in microseconds of its own clock:
//   input    from the previous step's end to its batch being ready
//            (0 where the trainer does not say: the Python package);
//   compute  from then to the step's end of backprop, less `push`;
//   push     encoding and starting the gradient pushes;
//   wait     from the end of backprop to the last reply.
struct StepReport {
  int64_t step = -1;  // -1: no report (the first step, older workers).
  int64_t input_us = 0;
  int64_t compute_us = 0;
  int64_t push_us = 0;
  int64_t wait_us = 0;
};

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_RPC_STEP_REPORT_H_
