// The pieces lockstep_worker assembles from its flags: which model, which
// data, and how the data must look for that model. Kept out of main.cc so
// they can be unit-tested.
#ifndef LOCKSTEP_WORKER_APP_SETUP_H_
#define LOCKSTEP_WORKER_APP_SETUP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"
#include "worker/data/image_data.h"
#include "worker/model/models.h"

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

// --layers: positive sizes separated by commas, at least two.
absl::StatusOr<std::vector<int>> ParseLayers(const std::string& text);

// This rank's delay in milliseconds from --straggle=RANK:MS[,RANK:MS...].
// `flag` names the flag in errors.
absl::StatusOr<int> StraggleFor(const std::string& spec, int rank,
                                const std::string& flag = "--straggle");

// Writes the weights (--dump_weights): as a safetensors file keyed by the
// names of `tensors` (the model's parameters, then its state) when `path`
// ends in ".safetensors", else as raw little-endian float32.
absl::Status DumpWeights(const std::string& path,
                         const std::vector<TensorInfo>& tensors,
                         absl::Span<const float> weights);

// --synthetic_examples for `spec`: in [1, MaxSyntheticExamples]. The most is
// what fits in half of `memory_bytes` (MachineMemoryBytes(); 0: unknown, no
// bound but int64's): the examples and a test set of a fifth, each example
// its input's floats and an int32 label, twice over for image models (made
// in one draw, then copied into the two sets). INVALID_ARGUMENT naming the
// flag, the range and the value otherwise.
int64_t MaxSyntheticExamples(const ModelSpec& spec, int64_t memory_bytes);
absl::Status CheckSyntheticExamples(int64_t examples, const ModelSpec& spec,
                                    int64_t memory_bytes);

// The image size of an image model's input.
ImageSize ImageSizeOf(const ModelSpec& spec);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_APP_SETUP_H_
