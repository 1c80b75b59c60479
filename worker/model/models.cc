#include "worker/model/models.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"
#include "worker/device/device_factory.h"
#include "worker/model/mlp.h"
#include "worker/model/nn/graph_builder.h"
#include "worker/model/nn/graph_model.h"

namespace lockstep {
namespace {

Conv2DOptions Conv(const ModelSpec& spec, int filters, int kernel, int stride,
                   Padding padding) {
  Conv2DOptions o;
  if (spec.conv_workspace_floats > 0) {
    o.workspace_limit_floats = spec.conv_workspace_floats;
  }
  o.filters = filters;
  o.kernel_height = o.kernel_width = kernel;
  o.stride_height = o.stride_width = stride;
  o.padding = padding;
  return o;
}

MaxPooling2DOptions Pool(int size, int stride) {
  MaxPooling2DOptions o;
  o.pool_height = o.pool_width = size;
  o.stride_height = o.stride_width = stride;
  return o;
}

DenseOptions Units(int units) {
  DenseOptions o;
  o.units = units;
  return o;
}

absl::StatusOr<Graph> LeNet(const ModelSpec& spec) {
  GraphBuilder b(spec.input);
  int x = b.Conv2D("conv2d_0", b.input(), Conv(spec, 6, 5, 1, Padding::kValid));
  x = b.ReLU("relu_0", x);
  x = b.MaxPooling2D("max_pooling2d_0", x, Pool(2, 2));
  x = b.Conv2D("conv2d_1", x, Conv(spec, 16, 5, 1, Padding::kValid));
  x = b.ReLU("relu_1", x);
  x = b.MaxPooling2D("max_pooling2d_1", x, Pool(2, 2));
  x = b.Flatten("flatten", x);
  x = b.Dense("dense_0", x, Units(120));
  x = b.ReLU("relu_2", x);
  x = b.Dense("dense_1", x, Units(84));
  x = b.ReLU("relu_3", x);
  x = b.Dense("dense_2", x, Units(spec.num_classes));
  return std::move(b).Finish(x);
}

// Keras cifar10_resnet's resnet_v1 of depth 6 * blocks + 2.
absl::StatusOr<Graph> CifarResNetV1(const ModelSpec& spec, int blocks) {
  GraphBuilder b(spec.input);
  int x = b.Conv2D("conv1", b.input(), Conv(spec, 16, 3, 1, Padding::kSame));
  x = b.BatchNormalization("conv1_bn", x);
  x = b.ReLU("conv1_relu", x);
  int filters = 16;
  for (int stage = 1; stage <= 3; ++stage, filters *= 2) {
    for (int block = 1; block <= blocks; ++block) {
      const std::string p = absl::StrCat("stage", stage, "_block", block, "_");
      const int stride = stage > 1 && block == 1 ? 2 : 1;
      int y = b.Conv2D(p + "conv1", x,
                       Conv(spec, filters, 3, stride, Padding::kSame));
      y = b.BatchNormalization(p + "bn1", y);
      y = b.ReLU(p + "relu1", y);
      y = b.Conv2D(p + "conv2", y, Conv(spec, filters, 3, 1, Padding::kSame));
      y = b.BatchNormalization(p + "bn2", y);
      if (stride != 1) {
        x = b.Conv2D(p + "shortcut", x,
                     Conv(spec, filters, 1, stride, Padding::kSame));
      }
      x = b.Add(p + "add", x, y);
      x = b.ReLU(p + "out", x);
    }
  }
  x = b.GlobalAveragePooling2D("avg_pool", x);
  x = b.Dense("predictions", x, Units(spec.num_classes));
  return std::move(b).Finish(x);
}

// keras.applications.resnet's block1: a bottleneck residual block. Layers
// are appended in the order of Keras's model.layers (its shortcut conv
// comes after the second ReLU), so the flat parameters follow Keras's
// trainable_weights.
int Bottleneck(const ModelSpec& spec, GraphBuilder& b, const std::string& name,
               int x, int filters, int stride, bool conv_shortcut) {
  BatchNormOptions bn;
  bn.epsilon = 1.001e-5f;
  int y = b.Conv2D(name + "_1_conv", x,
                   Conv(spec, filters, 1, stride, Padding::kValid));
  y = b.BatchNormalization(name + "_1_bn", y, bn);
  y = b.ReLU(name + "_1_relu", y);
  y = b.Conv2D(name + "_2_conv", y, Conv(spec, filters, 3, 1, Padding::kSame));
  y = b.BatchNormalization(name + "_2_bn", y, bn);
  y = b.ReLU(name + "_2_relu", y);
  int shortcut = x;
  if (conv_shortcut) {
    shortcut = b.Conv2D(name + "_0_conv", x,
                        Conv(spec, 4 * filters, 1, stride, Padding::kValid));
  }
  y = b.Conv2D(name + "_3_conv", y,
               Conv(spec, 4 * filters, 1, 1, Padding::kValid));
  if (conv_shortcut) {
    shortcut = b.BatchNormalization(name + "_0_bn", shortcut, bn);
  }
  y = b.BatchNormalization(name + "_3_bn", y, bn);
  y = b.Add(name + "_add", shortcut, y);
  return b.ReLU(name + "_out", y);
}

absl::StatusOr<Graph> ResNet50(const ModelSpec& spec) {
  GraphBuilder b(spec.input);
  BatchNormOptions bn;
  bn.epsilon = 1.001e-5f;
  int x = b.ZeroPadding2D("conv1_pad", b.input(), {3, 3, 3, 3});
  x = b.Conv2D("conv1_conv", x, Conv(spec, 64, 7, 2, Padding::kValid));
  x = b.BatchNormalization("conv1_bn", x, bn);
  x = b.ReLU("conv1_relu", x);
  x = b.ZeroPadding2D("pool1_pad", x, {1, 1, 1, 1});
  x = b.MaxPooling2D("pool1_pool", x, Pool(3, 2));
  struct Stage {
    int filters;
    int blocks;
    int stride;
  };
  const Stage stages[] = {{64, 3, 1}, {128, 4, 2}, {256, 6, 2}, {512, 3, 2}};
  for (int s = 0; s < 4; ++s) {
    for (int block = 1; block <= stages[s].blocks; ++block) {
      x = Bottleneck(spec, b, absl::StrCat("conv", s + 2, "_block", block), x,
                     stages[s].filters, block == 1 ? stages[s].stride : 1,
                     /*conv_shortcut=*/block == 1);
    }
  }
  x = b.GlobalAveragePooling2D("avg_pool", x);
  x = b.Dense("predictions", x, Units(spec.num_classes));
  return std::move(b).Finish(x);
}

}  // namespace

std::vector<std::string> ModelNames() {
  return {"mlp", "cnn", "resnet20", "resnet50"};
}

namespace {
absl::Status UnknownModel(const std::string& name) {
  return absl::InvalidArgumentError(
      absl::StrCat("unknown model \"", name,
                   "\"; known: ", absl::StrJoin(ModelNames(), ", ")));
}
}  // namespace

absl::StatusOr<Graph> BuildModelGraph(const ModelSpec& spec) {
  if (spec.num_classes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", spec.name, ": classes must be positive, got ",
                     spec.num_classes));
  }
  absl::StatusOr<Graph> graph;
  if (spec.name == "cnn") {
    graph = LeNet(spec);
  } else if (spec.name == "resnet20") {
    graph = CifarResNetV1(spec, 3);
  } else if (spec.name == "resnet50") {
    graph = ResNet50(spec);
  } else if (spec.name == "mlp") {
    return absl::InvalidArgumentError(
        "model mlp has no layer graph (graph models: cnn, resnet20, "
        "resnet50)");
  } else {
    return UnknownModel(spec.name);
  }
  if (!graph.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", spec.name, " on input ", spec.input.ToString(),
                     ": ", graph.status().message()));
  }
  return graph;
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec,
                                                   int max_batch,
                                                   Device* device) {
  if (spec.name == "mlp") {
    std::vector<int> sizes = {static_cast<int>(spec.input.size())};
    sizes.insert(sizes.end(), spec.hidden_units.begin(),
                 spec.hidden_units.end());
    sizes.push_back(spec.num_classes);
    ASSIGN_OR_RETURN(std::unique_ptr<GraphModel> mlp,
                     CreateMlp(sizes, max_batch, device));
    return std::unique_ptr<Model>(std::move(mlp));
  }
  bool known = false;
  for (const std::string& name : ModelNames()) known |= name == spec.name;
  if (!known) return UnknownModel(spec.name);
  ModelSpec resolved = spec;
  if (resolved.conv_workspace_floats == 0 && device != nullptr) {
    resolved.conv_workspace_floats = ConvWorkspaceFloatsFor(*device);
  }
  ASSIGN_OR_RETURN(Graph graph, BuildModelGraph(resolved));
  ASSIGN_OR_RETURN(std::unique_ptr<GraphModel> model,
                   GraphModel::Create(std::move(graph), max_batch, device));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace lockstep
