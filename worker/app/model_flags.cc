// lockstep_worker's model, data and training flags (worker_flag_groups.h).
#include <cstdint>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/base/machine_memory.h"
#include "common/base/status_macros.h"
#include "common/flags/flags.h"
#include "common/model/chunk_plan.h"
#include "worker/app/optimizer_flags.h"
#include "worker/app/setup.h"
#include "worker/app/worker_flag_groups.h"
#include "worker/train/progress.h"

ABSL_FLAG(std::string, model, "mlp",
          "mlp (see --layers), cnn (LeNet-style), resnet20 or resnet50.");
ABSL_FLAG(std::string, layers, "784,128,10",
          "MLP layer sizes, input first, classes last.");
ABSL_FLAG(std::string, input_shape, "",
          "Image models: H,W,C of an example (default: the data set's; "
          "32,32,3 for synthetic images).");
ABSL_FLAG(bool, augment, false,
          "Image models: random crops (padding 4) and horizontal flips.");
ABSL_FLAG(int, batch_size, 64, "Examples per worker per step.");
ABSL_FLAG(int, epochs, 5, "Passes over the training set.");
ABSL_FLAG(int64_t, max_steps, 0,
          "If > 0, stop after this many global steps (0: no limit).");
ABSL_FLAG(uint64_t, seed, 42,
          "Seed of the initial weights and of the shared data order.");
ABSL_FLAG(std::string, dataset, "idx",
          "idx (MNIST-format files in --data_dir), cifar10 (CIFAR-10's binary "
          "files in --data_dir) or synthetic.");
ABSL_FLAG(std::string, data_dir, "/usr/share/datasets/fashion-mnist",
          "Folder with {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz].");
ABSL_FLAG(int64_t, synthetic_examples, 6400,
          "Training examples of --dataset=synthetic (test set: a fifth); at "
          "most what fits in half of the machine's memory.");
ABSL_FLAG(std::string, chunk_bytes, "auto",
          "Largest tensor chunk on the wire: auto (about 32 chunks per "
          "server shard, 256 KiB to 4 MiB; one chunk per shard for a model "
          "of at most 1 MiB per shard) or bytes, at most 32 MiB.");
ABSL_FLAG(std::string, progress, "auto", "auto | bar | lines | none.");
ABSL_FLAG(bool, eval_every_epoch, false,
          "Rank 0 evaluates on the test set after every epoch.");
ABSL_FLAG(double, validation_split, 0,
          "Evaluate on the last fraction F of the training data, as Keras.");

namespace lockstep {

// The model, its data and how it is trained.
absl::Status ParseModelFlags(WorkerMainOptions* options) {
  WorkerMainOptions& o = *options;
  ASSIGN_OR_RETURN(const std::vector<int> layers,
                   ParseLayers(absl::GetFlag(FLAGS_layers)));
  ASSIGN_OR_RETURN(o.trainer.optimizer, OptimizerFromFlags());
  o.trainer.batch_size = absl::GetFlag(FLAGS_batch_size);
  o.trainer.epochs = absl::GetFlag(FLAGS_epochs);
  o.trainer.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.trainer.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(
      o.trainer.chunk_bytes,
      FromFlag("chunk_bytes", ParseChunkBytes(absl::GetFlag(FLAGS_chunk_bytes),
                                              int64_t{32} << 20)));
  o.trainer.eval_every_epoch = absl::GetFlag(FLAGS_eval_every_epoch);
  o.validation_split = absl::GetFlag(FLAGS_validation_split);
  ASSIGN_OR_RETURN(
      o.trainer.progress,
      FromFlag("progress", ParseProgressMode(absl::GetFlag(FLAGS_progress))));
  if (o.trainer.batch_size < 1 || o.trainer.batch_size > (1 << 20)) {
    return absl::InvalidArgumentError("--batch_size must be in [1, 1048576]");
  }
  if (o.trainer.epochs < 1) {
    return absl::InvalidArgumentError("--epochs must be at least 1");
  }
  if (o.trainer.max_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--max_steps must be >= 0 (0: no limit), got ", o.trainer.max_steps));
  }
  o.data.dataset = absl::GetFlag(FLAGS_dataset);
  o.data.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.data.synthetic_examples = absl::GetFlag(FLAGS_synthetic_examples);
  o.data.seed = o.trainer.seed;
  if (o.data.dataset == "cifar10" &&
      o.data.data_dir == "/usr/share/datasets/fashion-mnist") {
    o.data.data_dir.clear();  // The default is Fashion-MNIST's folder.
  }
  ASSIGN_OR_RETURN(o.model,
                   MakeModelSpec(absl::GetFlag(FLAGS_model), layers,
                                 absl::GetFlag(FLAGS_input_shape), o.data));
  // Checked with any --dataset, as it always was (the default fits).
  RETURN_IF_ERROR(CheckSyntheticExamples(o.data.synthetic_examples, o.model,
                                         MachineMemoryBytes()));
  if (o.model.name != "mlp") {
    o.trainer.image_size = ImageSizeOf(o.model);
    o.trainer.augmentation.random_crop = absl::GetFlag(FLAGS_augment);
    o.trainer.augmentation.horizontal_flip = absl::GetFlag(FLAGS_augment);
  }
  o.layers = absl::GetFlag(FLAGS_layers);
  return absl::OkStatus();
}

}  // namespace lockstep
