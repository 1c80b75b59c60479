// What a worker's training loop is told (Trainer and its parts):
// parsed once from the flags in worker/app and passed down.
#ifndef LOCKSTEP_WORKER_TRAIN_TRAINER_OPTIONS_H_
#define LOCKSTEP_WORKER_TRAIN_TRAINER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "common/base/env.h"
#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "worker/data/dataset.h"
#include "worker/data/image_data.h"
#include "worker/train/progress.h"
#include "worker/train/step_observer.h"
#include "worker/train/training_callback.h"

namespace lockstep {

// How a worker's gradients meet the others'.
struct TrainerOptions {
  int rank = 0;
  int num_workers = 1;
  int num_shards = 1;
  int batch_size = 64;
  int epochs = 5;
  int64_t max_steps = 0;  // > 0: stop after this many global steps.
  uint64_t seed = 42;
  OptimizerConfig optimizer;
  // Version 0 when this worker defines it (parameters, then state), in
  // place of the model's seeded initializer; empty: the initializer.
  std::vector<float> initial_weights;
  int64_t chunk_bytes = kAutoChunkBytes;  // common/model/chunk_plan.h
  ProgressMode progress = ProgressMode::kLines;
  bool eval_every_epoch = false;
  // Held out of the training data (--validation_split) and evaluated by
  // every rank at the end of each epoch. Not owned; may be null.
  const Dataset* validation = nullptr;
  // Told each step's and each epoch's figures (history, TensorBoard,
  // gauges). Not owned; may be null.
  TrainingCallback* callback = nullptr;
  SyncMode sync = SyncMode::kSync;
  int backup_workers = 0;  // kSync: steps close after W - b pushes.
  int staleness = 0;       // kSsp.
  // Stragglers on purpose: a fixed delay per step, plus a random one drawn
  // uniformly from [0, straggle_random_ms] (seeded by seed, rank and step).
  int straggle_ms = 0;
  int straggle_random_ms = 0;
  int straggle_input_ms = 0;  // The same in the batch loading (input).
  // Told where each step's time goes (metrics, traces). Not owned; may be
  // null.
  StepObserver* observer = nullptr;
  // Image models: random crops and flips (seeded by seed, step and example).
  ImageAugmentation augmentation;
  ImageSize image_size;
  // Called after each step this worker completes, with that step, the
  // seconds since the training loop began and the step's mean batch loss:
  // what loss-against-time curves need (--step_log). May be empty.
  std::function<void(int64_t step, double seconds, double loss)> on_step;
  // The clock of the loop's times (on_step, the epochs' rates, the
  // summary) and of its sleeps (straggling); the
  // observer's phases are timed on the real clock, as its metrics and
  // traces are. Not owned.
  Env* env = Env::Default();
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_TRAIN_TRAINER_OPTIONS_H_
