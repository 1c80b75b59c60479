#include "worker/app/setup.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/base/status_macros.h"
#include "common/formats/json_writer.h"
#include "common/formats/safetensors.h"
#include "worker/data/cifar_reader.h"

namespace lockstep {
namespace {

int64_t Elements(const TensorShape& shape) { return shape.size(); }

// Examples [first, first + count) of `all`.
Dataset Split(const Dataset& all, int64_t first, int64_t count) {
  Dataset part;
  part.num_examples = count;
  part.feature_dim = all.feature_dim;
  part.num_classes = all.num_classes;
  part.features.assign(
      all.features.begin() + first * all.feature_dim,
      all.features.begin() + (first + count) * all.feature_dim);
  part.labels.assign(all.labels.begin() + first,
                     all.labels.begin() + first + count);
  return part;
}

}  // namespace

ImageSize ImageSizeOf(const ModelSpec& spec) {
  ImageSize size;
  size.height = spec.input.height;
  size.width = spec.input.width;
  size.channels = spec.input.channels;
  return size;
}

absl::StatusOr<ModelSpec> MakeModelSpec(const std::string& model,
                                        const std::vector<int>& layers,
                                        const std::string& input_shape,
                                        const DataOptions& data) {
  ModelSpec spec;
  spec.name = model;
  if (model == "mlp") {
    if (layers.size() < 2) {
      return absl::InvalidArgumentError(
          "--layers needs at least an input and an output size");
    }
    spec.input = {1, 1, layers.front()};
    spec.num_classes = layers.back();
    spec.hidden_units.assign(layers.begin() + 1, layers.end() - 1);
    return spec;
  }
  spec.num_classes = 10;
  if (!input_shape.empty()) {
    std::vector<int> dims;
    for (absl::string_view part : absl::StrSplit(input_shape, ',')) {
      int d = 0;
      if (!absl::SimpleAtoi(part, &d) || d < 1 || d > 4096) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--input_shape takes H,W,C, got \"", input_shape, "\""));
      }
      dims.push_back(d);
    }
    if (dims.size() != 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("--input_shape takes H,W,C, got \"", input_shape, "\""));
    }
    spec.input = {dims[0], dims[1], dims[2]};
  } else if (data.dataset == "idx") {
    spec.input = {28, 28, 1};
  } else {
    spec.input = {32, 32, 3};
  }
  // Checks the name and that the input is large enough for the network.
  RETURN_IF_ERROR(BuildModelGraph(spec).status());
  return spec;
}

namespace {

// The synthetic train and test sets for `spec`'s input and classes.
void MakeSyntheticData(const DataOptions& data, const ModelSpec& spec,
                       Dataset* train, Dataset* test) {
  const int64_t features = Elements(spec.input);
  const int classes = spec.num_classes;
  const int64_t test_examples =
      std::max<int64_t>(1, data.synthetic_examples / 5);
  if (spec.name == "mlp") {
    *train =
        MakeSyntheticDataset(data.synthetic_examples,
                             static_cast<int>(features), classes, data.seed);
    *test = MakeSyntheticDataset(test_examples, static_cast<int>(features),
                                 classes, data.seed + 1);
    return;
  }
  // One draw split in two, so the test images share the classes'
  // templates (the seed) with the training images.
  Dataset all = MakeSyntheticImages(data.synthetic_examples + test_examples,
                                    ImageSizeOf(spec), classes, data.seed);
  *train = Split(all, 0, data.synthetic_examples);
  *test = Split(all, data.synthetic_examples, test_examples);
}

// The synthetic sets' bytes for each training example (the test set's
// fifth not counted).
int64_t SyntheticBytesPerExample(const ModelSpec& spec) {
  const int64_t bytes =
      Elements(spec.input) * int64_t{sizeof(float)} + int64_t{sizeof(int32_t)};
  return spec.name == "mlp" ? bytes : 2 * bytes;
}

// The examples MakeSyntheticData makes for `examples` training ones.
int64_t SyntheticExamplesMade(int64_t examples) {
  return examples + std::max<int64_t>(1, examples / 5);
}

// Checks the loaded sets against the model's input and classes; an error
// names the mismatch (and the test split's files).
absl::Status CheckAgainstModel(const DataOptions& data, const ModelSpec& spec,
                               const Dataset& train, const Dataset& test) {
  const int64_t features = Elements(spec.input);
  const int classes = spec.num_classes;
  if (train.feature_dim != features) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the data has ", train.feature_dim,
        " values per example but the model takes ", features,
        spec.name == "mlp" ? " (the first of --layers)" : " (--input_shape)"));
  }
  if (train.num_classes > classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", train.num_classes,
                     " classes but the model has ", classes));
  }
  // The test split is only read at the end: check it now, not after
  // training.
  const std::string test_files =
      absl::StrCat("the test split (",
                   data.dataset == "cifar10"
                       ? "test_batch.bin"
                       : "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte",
                   " in ", data.data_dir, ")");
  if (test.num_examples == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(test_files, " has no examples"));
  }
  if (test.feature_dim != train.feature_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        test_files, " has ", test.feature_dim,
        " values per example, the training split ", train.feature_dim));
  }
  if (test.num_classes > classes) {
    return absl::InvalidArgumentError(
        absl::StrCat(test_files, " has ", test.num_classes,
                     " classes but the model has ", classes));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t MaxSyntheticExamples(const ModelSpec& spec, int64_t memory_bytes) {
  const int64_t budget =
      memory_bytes > 0 ? memory_bytes / 2 : std::numeric_limits<int64_t>::max();
  // The most examples made, test set included, then the most training
  // examples that make no more (n + n / 5 grows by 1 or 2 a step).
  const int64_t made = budget / SyntheticBytesPerExample(spec);
  int64_t most = made / 6 * 5 + made % 6 * 5 / 6;
  while (SyntheticExamplesMade(most + 1) <= made) ++most;
  while (most > 0 && SyntheticExamplesMade(most) > made) --most;
  return most;
}

absl::Status CheckSyntheticExamples(int64_t examples, const ModelSpec& spec,
                                    int64_t memory_bytes) {
  const int64_t most = MaxSyntheticExamples(spec, memory_bytes);
  if (examples >= 1 && examples <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--synthetic_examples must be in [1, ", most, "] (with a test set of a ",
      "fifth, at ", SyntheticBytesPerExample(spec),
      " bytes an example: half of this machine's memory), got ", examples));
}

absl::Status LoadData(const DataOptions& data, const ModelSpec& spec,
                      Dataset* train, Dataset* test) {
  if (data.dataset == "synthetic") {
    MakeSyntheticData(data, spec, train, test);
    return absl::OkStatus();
  }
  if (data.dataset == "cifar10") {
    if (data.data_dir.empty()) {
      return absl::InvalidArgumentError(
          "--dataset=cifar10 needs --data_dir=DIR holding data_batch_1.bin "
          ".. data_batch_5.bin and test_batch.bin (the binary version)");
    }
    ASSIGN_OR_RETURN(*train, LoadCifar10(data.data_dir, /*train=*/true));
    ASSIGN_OR_RETURN(*test, LoadCifar10(data.data_dir, /*train=*/false));
  } else if (data.dataset == "idx") {
    ASSIGN_OR_RETURN(*train, LoadIdxDataset(data.data_dir, /*train=*/true));
    ASSIGN_OR_RETURN(*test, LoadIdxDataset(data.data_dir, /*train=*/false));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset must be idx, cifar10 or synthetic, got \"",
                     data.dataset, "\""));
  }
  return CheckAgainstModel(data, spec, *train, *test);
}

absl::StatusOr<std::vector<int>> ParseLayers(const std::string& text) {
  std::vector<int> layers;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int size = 0;
    if (!absl::SimpleAtoi(part, &size) || size < 1 || size > (1 << 24)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--layers must be positive integers separated by commas, got \"",
          text, "\""));
    }
    layers.push_back(size);
  }
  if (layers.size() < 2) {
    return absl::InvalidArgumentError(
        "--layers needs at least an input and an output size");
  }
  return layers;
}

// This rank's delay from --straggle=RANK:MS[,RANK:MS...].
absl::StatusOr<int> StraggleFor(const std::string& spec, int rank,
                                const std::string& flag) {
  int ms = 0;
  for (absl::string_view item : absl::StrSplit(spec, ',', absl::SkipEmpty())) {
    std::pair<absl::string_view, absl::string_view> parts =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    int r = 0, delay = 0;
    if (!absl::SimpleAtoi(parts.first, &r) ||
        !absl::SimpleAtoi(parts.second, &delay) || r < 0 || delay < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " takes RANK:MS[,RANK:MS...], got \"", spec, "\""));
    }
    if (r == rank) ms += delay;
  }
  return ms;
}

absl::Status DumpWeights(const std::string& path,
                         const std::vector<TensorInfo>& tensors,
                         absl::Span<const float> weights) {
  if (absl::EndsWith(path, ".safetensors")) {
    return WriteSafetensors(path, tensors, weights);
  }
  return WriteFileAtomically(
      path, absl::string_view(reinterpret_cast<const char*>(weights.data()),
                              weights.size() * sizeof(float)));
}

}  // namespace lockstep
