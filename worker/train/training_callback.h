// What the training loop reports after each step and each epoch, as Keras
// hands its callbacks `logs`: the figures the progress line shows, for the
// history in the summary, TensorBoard event files and Prometheus gauges.
// Called on the training thread, in step order.
#ifndef LOCKSTEP_WORKER_TRAIN_TRAINING_CALLBACK_H_
#define LOCKSTEP_WORKER_TRAIN_TRAINING_CALLBACK_H_

#include <cstdint>
#include <vector>

#include "common/model/model_signature.h"
#include "common/optim/lr_schedule.h"  // LearningRateAt, which the reports read.

namespace lockstep {

// One global step this worker completed.
struct StepLogs {
  int64_t step = 0;         // Global steps completed: the step's index + 1.
  int64_t total_steps = 0;  // The job's.
  int epoch = 0;            // This step's, from 1.
  int epochs = 0;           // The job's.
  double batch_loss = 0;    // This worker's batch.
  double batch_accuracy = 0;
  double loss = 0;  // Running mean over this worker's batches in the epoch.
  double accuracy = 0;
  double step_seconds = 0;      // Since the previous step ended.
  double examples_per_sec = 0;  // All workers' examples over step_seconds.
  double learning_rate = 0;
};

// One epoch that ran to its end.
struct EpochLogs {
  int epoch = 0;     // From 1.
  int64_t step = 0;  // Global steps completed at its end.
  double loss = 0;   // Mean over this worker's batches in the epoch.
  double accuracy = 0;
  double examples_per_sec = 0;  // All workers' examples per second.
  bool has_validation = false;  // --validation_split.
  double val_loss = 0;
  double val_accuracy = 0;
  double learning_rate = 0;  // At the epoch's last step.
};

class TrainingCallback {
 public:
  virtual ~TrainingCallback() = default;
  virtual void OnStepEnd(const StepLogs& logs) = 0;
  virtual void OnEpochEnd(const EpochLogs& logs) = 0;
};

// Hands every call to each of `callbacks` in order (none: nothing).
class CallbackList final : public TrainingCallback {
 public:
  void Add(TrainingCallback* callback) { callbacks_.push_back(callback); }
  bool empty() const { return callbacks_.empty(); }
  void OnStepEnd(const StepLogs& logs) override {
    for (TrainingCallback* c : callbacks_) c->OnStepEnd(logs);
  }
  void OnEpochEnd(const EpochLogs& logs) override {
    for (TrainingCallback* c : callbacks_) c->OnEpochEnd(logs);
  }

 private:
  std::vector<TrainingCallback*> callbacks_;  // Not owned.
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_TRAINING_CALLBACK_H_
