#include "worker/data/image_data.h"

#include <algorithm>
#include <vector>

#include "common/base/random.h"
#include "worker/data/check_or_die.h"

namespace lockstep {

Dataset MakeSyntheticImages(int64_t num_examples, const ImageSize& size,
                            int num_classes, uint64_t seed, float noise) {
  CheckOrDie(num_examples >= 0, "num_examples >= 0");
  CheckOrDie(size.height >= 1 && size.width >= 1 && size.channels >= 1,
             "a non-empty image size");
  CheckOrDie(num_classes >= 1, "num_classes >= 1");
  const int64_t dim = size.size();
  Dataset data;
  data.num_examples = num_examples;
  data.feature_dim = static_cast<int>(dim);
  data.num_classes = num_classes;
  Random template_rng(Random::Derive(seed, 2));
  std::vector<float> templates(num_classes * dim);
  for (float& t : templates) t = template_rng.Uniform(-1.0f, 1.0f);
  // Labels from their own stream, like MakeSyntheticDataset's.
  Random label_rng(Random::Derive(seed, 1));
  Random noise_rng(Random::Derive(seed, 0));
  data.labels.resize(num_examples);
  data.features.resize(num_examples * dim);
  for (int64_t i = 0; i < num_examples; ++i) {
    const int32_t label =
        static_cast<int32_t>(label_rng.UniformInt(num_classes));
    data.labels[i] = label;
    const float* t = templates.data() + label * dim;
    float* image = data.features.data() + i * dim;
    for (int64_t j = 0; j < dim; ++j) {
      image[j] = t[j] + noise_rng.Uniform(-noise, noise);
    }
  }
  return data;
}

void AugmentImages(const ImageAugmentation& augmentation, const ImageSize& size,
                   uint64_t seed, int64_t step,
                   absl::Span<const int64_t> indices,
                   absl::Span<float> images) {
  const int64_t dim = size.size();
  CheckOrDie(dim > 0, "a non-empty image size");
  CheckOrDie(images.size() == indices.size() * dim,
             "images.size() == indices.size() * image size");
  CheckOrDie(augmentation.crop_padding >= 0, "crop_padding >= 0");
  if (!augmentation.random_crop && !augmentation.horizontal_flip) return;
  const int pad = augmentation.random_crop ? augmentation.crop_padding : 0;
  const int c = size.channels;
  const uint64_t step_seed = Random::Derive(seed, static_cast<uint64_t>(step));
  std::vector<float> source(dim);
  for (size_t k = 0; k < indices.size(); ++k) {
    Random random(Random::Derive(step_seed, static_cast<uint64_t>(indices[k])));
    // Always draw both, so turning one augmentation off leaves the other's
    // draws unchanged.
    const int dy = static_cast<int>(random.UniformInt(2 * pad + 1)) - pad;
    const int dx = static_cast<int>(random.UniformInt(2 * pad + 1)) - pad;
    const bool flip = augmentation.horizontal_flip && random.UniformInt(2) == 1;
    float* image = images.data() + k * dim;
    std::copy(image, image + dim, source.begin());
    // Output pixel (h, w) comes from (h + dy, w' + dx), w' = w or its mirror;
    // outside the source it is the zero padding.
    for (int h = 0; h < size.height; ++h) {
      const int sh = h + dy;
      for (int w = 0; w < size.width; ++w) {
        float* out = image + (int64_t{h} * size.width + w) * c;
        const int sw = (flip ? size.width - 1 - w : w) + dx;
        if (sh < 0 || sh >= size.height || sw < 0 || sw >= size.width) {
          std::fill(out, out + c, 0.0f);
          continue;
        }
        const float* in = source.data() + (int64_t{sh} * size.width + sw) * c;
        std::copy(in, in + c, out);
      }
    }
  }
}

}  // namespace lockstep
