// Image data helpers: a synthetic image source for tests and benchmarks, and
// the random crop and horizontal flip augmentations CIFAR training uses.
// Images are NHWC float rows of a Dataset (feature_dim = height * width *
// channels). Stateless functions; deterministic on every machine.
#ifndef LOCKSTEP_WORKER_DATA_IMAGE_DATA_H_
#define LOCKSTEP_WORKER_DATA_IMAGE_DATA_H_

#include <cstdint>

#include "absl/types/span.h"
#include "worker/data/dataset.h"

namespace lockstep {

struct ImageSize {
  int height = 32;
  int width = 32;
  int channels = 3;

  int64_t size() const { return int64_t{height} * width * channels; }
};

// `num_examples` images of `size` that a network can learn: class k has a
// fixed template (uniform in [-1, 1), drawn from `seed`), and each image is
// its class's template plus uniform noise in [-noise, noise). Labels are
// uniform in [0, num_classes). num_examples >= 0, num_classes >= 1.
Dataset MakeSyntheticImages(int64_t num_examples, const ImageSize& size,
                            int num_classes, uint64_t seed, float noise = 1.0f);

struct ImageAugmentation {
  // Pad `crop_padding` zeros on every side, then crop back to the original
  // size at a random offset (zero is the mean pixel of normalized data).
  bool random_crop = false;
  int crop_padding = 4;
  // Mirror left-right with probability 1/2.
  bool horizontal_flip = false;
};

// Augments, in place, the images.size() / size.size() images of a batch,
// whose data-set indices are `indices` (one per image). Image k's crop and
// flip depend only on (seed, step, indices[k]): not on the worker's rank or
// the image's place in the batch, so W workers with batch B augment exactly
// as one worker with batch W * B over the same examples, and a rerun with
// the same seed repeats every draw.
void AugmentImages(const ImageAugmentation& augmentation, const ImageSize& size,
                   uint64_t seed, int64_t step,
                   absl::Span<const int64_t> indices, absl::Span<float> images);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_IMAGE_DATA_H_
