// lockstep_worker's flags by group, for WorkerOptionsFromFlags
// (worker_flags.cc, their only caller): each group's flags are defined,
// with their help text, in the file named here, and one function turns them
// into their part of WorkerMainOptions, INVALID_ARGUMENT naming the flag
// when one is bad. WorkerOptionsFromFlags calls them in the order below,
// after the job's flags (--servers, --rank, --workers, in worker_flags.cc):
// each reads what the earlier ones set.
#ifndef LOCKSTEP_WORKER_APP_WORKER_FLAG_GROUPS_H_
#define LOCKSTEP_WORKER_APP_WORKER_FLAG_GROUPS_H_

#include "absl/status/status.h"
#include "worker/app/worker_flags.h"

namespace lockstep {

// model_flags.cc: the model, its data and how it is trained (with the
// optimizer's flags, optimizer_flags.h).
absl::Status ParseModelFlags(WorkerMainOptions* options);

// device_output_flags.cc: the device, and what the worker writes and serves
// besides training. Needs the rank and the batch size.
absl::Status ParseDeviceAndOutputFlags(WorkerMainOptions* options);

// exchange_flags.cc: how the worker's steps meet the others': the sync
// mode, the all-reduce and its group, deadlines and credentials, backup
// workers, staleness, stragglers, and how pushes go on the wire. Needs the
// job, the seed, the GPU and the chunk size.
absl::Status ParseExchangeFlags(WorkerMainOptions* options);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_WORKER_FLAG_GROUPS_H_
