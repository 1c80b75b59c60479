#include "worker/data/dataset.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/random.h"
#include "common/base/status_macros.h"
#include "worker/data/check_or_die.h"
#include "worker/data/idx_reader.h"

namespace lockstep {
namespace {

// MNIST and Fashion-MNIST both have ten classes; a larger label means a
// corrupt or foreign labels file.
constexpr int kIdxNumClasses = 10;

// Reads `dir`/`name`, or `dir`/`name`.gz when the plain file is absent, so
// both the distribution's compressed files and unpacked copies work.
absl::StatusOr<std::pair<std::string, IdxArray>> ReadPlainOrGz(
    const std::string& dir, const std::string& name) {
  const std::string plain = dir.empty() ? name : absl::StrCat(dir, "/", name);
  absl::StatusOr<IdxArray> array = ReadIdxFile(plain);
  if (array.ok()) return std::make_pair(plain, *std::move(array));
  if (!absl::IsNotFound(array.status())) return array.status();

  const std::string gz = absl::StrCat(plain, ".gz");
  array = ReadIdxFile(gz);
  if (array.ok()) return std::make_pair(gz, *std::move(array));
  if (absl::IsNotFound(array.status())) {
    return absl::NotFoundError(
        absl::StrCat("neither ", plain, " nor ", gz, " exists"));
  }
  return array.status();
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, bool train) {
  const std::string prefix = train ? "train" : "t10k";
  ASSIGN_OR_RETURN(auto images,
                   ReadPlainOrGz(dir, prefix + "-images-idx3-ubyte"));
  ASSIGN_OR_RETURN(auto labels,
                   ReadPlainOrGz(dir, prefix + "-labels-idx1-ubyte"));
  const std::string& images_path = images.first;
  const std::string& labels_path = labels.first;
  const IdxArray& image_array = images.second;
  const IdxArray& label_array = labels.second;

  if (image_array.dims.size() != 3) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: images need 3 dimensions (count, rows, columns), found %d",
        images_path, image_array.dims.size()));
  }
  if (label_array.dims.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: labels need 1 dimension, found %d", labels_path,
                        label_array.dims.size()));
  }
  const int64_t num_images = image_array.dims[0];
  const int64_t num_labels = label_array.dims[0];
  if (num_images != num_labels) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s holds %d images but %s holds %d labels",
                        images_path, num_images, labels_path, num_labels));
  }
  // With zero images the reader's size cap says nothing about rows and
  // columns, so the product is checked here; each is < 2^32, so uint64 holds
  // it.
  const uint64_t pixels = static_cast<uint64_t>(image_array.dims[1]) *
                          static_cast<uint64_t>(image_array.dims[2]);
  if (pixels == 0 || pixels > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: images of %dx%d pixels", images_path,
                        image_array.dims[1], image_array.dims[2]));
  }

  Dataset data;
  data.num_examples = num_images;
  data.feature_dim = static_cast<int>(pixels);
  data.num_classes = kIdxNumClasses;
  data.labels.resize(num_labels);
  for (int64_t i = 0; i < num_labels; ++i) {
    const uint8_t label = label_array.data[i];
    if (label >= kIdxNumClasses) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s: label %d of example %d is not below %d",
                          labels_path, label, i, kIdxNumClasses));
    }
    data.labels[i] = label;
  }
  data.features.resize(image_array.data.size());
  for (size_t i = 0; i < image_array.data.size(); ++i) {
    data.features[i] = static_cast<float>(image_array.data[i]) / 255.0f;
  }
  return data;
}

Dataset MakeSyntheticDataset(int64_t num_examples, int feature_dim,
                             int num_classes, uint64_t seed) {
  CheckOrDie(num_examples >= 0, "num_examples >= 0");
  CheckOrDie(feature_dim >= 0, "feature_dim >= 0");
  CheckOrDie(num_classes >= 1, "num_classes >= 1");
  Dataset data;
  data.num_examples = num_examples;
  data.feature_dim = feature_dim;
  data.num_classes = num_classes;
  data.features.resize(num_examples * feature_dim);
  data.labels.resize(num_examples);
  // Separate streams keep the labels the same whatever feature_dim is, so
  // two models over the same seed see the same targets.
  Random feature_rng(Random::Derive(seed, 0));
  Random label_rng(Random::Derive(seed, 1));
  for (float& x : data.features) x = feature_rng.Uniform(-1.0f, 1.0f);
  for (int32_t& y : data.labels) {
    y = static_cast<int32_t>(label_rng.UniformInt(num_classes));
  }
  return data;
}

void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices,
                 absl::Span<float> features, absl::Span<int32_t> labels) {
  const size_t dim = static_cast<size_t>(data.feature_dim);
  CheckOrDie(features.size() == indices.size() * dim,
             "features.size() == indices.size() * feature_dim");
  CheckOrDie(labels.size() == indices.size(),
             "labels.size() == indices.size()");
  for (size_t row = 0; row < indices.size(); ++row) {
    const int64_t index = indices[row];
    CheckOrDie(index >= 0 && index < data.num_examples,
               "0 <= index < num_examples");
    const float* src = data.features.data() + static_cast<size_t>(index) * dim;
    std::copy(src, src + dim, features.begin() + row * dim);
    labels[row] = data.labels[index];
  }
}

}  // namespace lockstep
