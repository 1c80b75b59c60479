// In-memory classification data sets: MNIST-style IDX files or synthetic
// examples. Immutable once built.
#ifndef LOCKSTEP_WORKER_DATA_DATASET_H_
#define LOCKSTEP_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace lockstep {

struct Dataset {
  int64_t num_examples = 0;
  int feature_dim = 0;
  int num_classes = 0;
  std::vector<float> features;  // num_examples x feature_dim, row-major.
  std::vector<int32_t> labels;  // num_examples entries in [0, num_classes).
};

// Loads the train or test split from `dir`, which holds
// {train,t10k}-{images-idx3,labels-idx1}-ubyte, each optionally with ".gz".
// Pixels are scaled to [0, 1]; images are flattened. Errors name the file:
// NOT_FOUND when missing, INVALID_ARGUMENT when malformed or when image and
// label counts differ or a label is >= 10.
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, bool train);

// `num_examples` random examples: features uniform in [-1, 1), labels uniform
// in [0, num_classes). Deterministic in `seed` on every machine.
Dataset MakeSyntheticDataset(int64_t num_examples, int feature_dim,
                             int num_classes, uint64_t seed);

// Copies the rows `indices` of `data` into `features` (indices.size() x
// feature_dim) and `labels`.
void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices,
                 absl::Span<float> features, absl::Span<int32_t> labels);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_DATASET_H_
