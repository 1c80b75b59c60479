// The pieces lockstep_worker assembles from its flags: which model, which
// data, and how the data must look for that model. Kept out of main.cc so
// they can be unit-tested.
#ifndef LOCKSTEP_WORKER_SETUP_H_
#define LOCKSTEP_WORKER_SETUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/dataset.h"
#include "worker/image_data.h"
#include "worker/models.h"

namespace lockstep {

struct DataOptions {
  std::string dataset = "idx";  // idx | cifar10 | synthetic
  std::string data_dir;
  int64_t synthetic_examples = 6400;
  uint64_t seed = 42;
};

// The model for --model, --layers (mlp: input, hidden..., classes) and
// --input_shape (image models: H,W,C; empty: the data set's own, 32x32x3
// for synthetic images).
absl::StatusOr<ModelSpec> MakeModelSpec(const std::string& model,
                                        const std::vector<int>& layers,
                                        const std::string& input_shape,
                                        const DataOptions& data);

// Loads (or makes) the train and test sets and checks them against `spec`:
// an error names the file or the mismatch.
absl::Status LoadData(const DataOptions& data, const ModelSpec& spec,
                      Dataset* train, Dataset* test);

// The image size of an image model's input.
ImageSize ImageSizeOf(const ModelSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_SETUP_H_
