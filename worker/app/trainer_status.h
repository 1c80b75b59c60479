// Rank 0's progress in a Kubeflow Trainer TrainJob's status.trainerStatus
// (Trainer's TrainJob progress proposal, KEP-2779): when the pod is given
// the status endpoint (KUBEFLOW_TRAINER_STATUS_SERVER_URL, its CA file
// KUBEFLOW_TRAINER_STATUS_SERVER_CA_CERT and the projected token's file
// KUBEFLOW_TRAINER_STATUS_SERVER_TOKEN, all of which Trainer injects), it
// POSTs {"trainerStatus": {progressPercentage, estimatedRemainingSeconds,
// metrics: [{name, value}], lastUpdatedTime}} at most every `every`, at
// each epoch's first step (with the last epoch's validation figures) and
// once at the end, with the test loss and accuracy.
//
// Posts run on a thread of their own, so a slow or absent endpoint never
// holds a step; a failed post is said once on stderr (and again only when
// the error changes) and the job goes on. Where no URL is given, nothing
// is made and nothing is sent.
#ifndef LOCKSTEP_WORKER_APP_TRAINER_STATUS_H_
#define LOCKSTEP_WORKER_APP_TRAINER_STATUS_H_

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/train/training_callback.h"

namespace lockstep {

struct TrainerStatusEndpoint {
  std::string url;
  std::string ca_file;
  std::string token_file;  // Read at every post: projected tokens rotate.
};

// The endpoint Trainer gives the pod, or nullopt (no URL).
std::optional<TrainerStatusEndpoint> TrainerStatusEndpointFromEnvironment();

// One report: what progress and metrics say now.
struct TrainerStatus {
  int progress_percentage = 0;
  std::optional<int64_t> remaining_seconds;
  std::vector<std::pair<std::string, std::string>> metrics;
  absl::Time updated;
};

// The request body for `status`, as the proposal defines it.
std::string TrainerStatusJson(const TrainerStatus& status);

class TrainerStatusReporter final : public TrainingCallback {
 public:
  TrainerStatusReporter(TrainerStatusEndpoint endpoint, absl::Duration every);
  ~TrainerStatusReporter() override;  // Stops the thread; no final post.

  void OnStepEnd(const StepLogs& logs) override;
  void OnEpochEnd(const EpochLogs& logs) override;
  // The job's end: progress 100, the test figures (negative: none), posted
  // before it returns (within the post's timeout).
  void Finish(int64_t steps, double test_loss, double test_accuracy);

 private:
  void Post(const TrainerStatus& status);
  void Loop();

  const TrainerStatusEndpoint endpoint_;
  const absl::Duration every_;
  absl::Mutex mu_;
  std::optional<TrainerStatus> pending_ ABSL_GUARDED_BY(mu_);
  // The newest step's report, posted or not, less the epoch's figures:
  // the end's starts from it, with the newest epoch's.
  std::optional<TrainerStatus> last_ ABSL_GUARDED_BY(mu_);
  absl::Time last_queued_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<std::pair<std::string, std::string>> epoch_metrics_
      ABSL_GUARDED_BY(mu_);
  int64_t first_step_ ABSL_GUARDED_BY(mu_) = -1;  // The first reported.
  absl::Time first_time_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::string said_ ABSL_GUARDED_BY(post_mu_);  // The last error said.
  absl::Mutex post_mu_;                         // One post at a time.
  std::thread thread_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_TRAINER_STATUS_H_
