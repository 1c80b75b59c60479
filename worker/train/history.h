// The per-epoch history of a run, as Keras's History.history holds it: for
// each figure (loss, accuracy, val_loss, val_accuracy, examples_per_sec) a
// list with one value per epoch that ran to its end, written into the
// worker's summary JSON.
#ifndef LOCKSTEP_WORKER_TRAIN_HISTORY_H_
#define LOCKSTEP_WORKER_TRAIN_HISTORY_H_

#include <string>
#include <vector>

#include "worker/train/training_callback.h"

namespace lockstep {

class History final : public TrainingCallback {
 public:
  void OnStepEnd(const StepLogs&) override {}
  void OnEpochEnd(const EpochLogs& logs) override { epochs_.push_back(logs); }

  const std::vector<EpochLogs>& epochs() const { return epochs_; }

  // A JSON object: {"epoch": [1, 2], "loss": [...], "accuracy": [...],
  // "examples_per_sec": [...]} and, where the epochs were validated,
  // "val_loss" and "val_accuracy". Values printed to double precision
  // (%.17g), so that a reader gets the very values back.
  std::string ToJson() const;

 private:
  std::vector<EpochLogs> epochs_;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_HISTORY_H_
