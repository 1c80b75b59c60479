#include "worker/model/models.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/nn_test_util.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/data/image_data.h"
#include "worker/model/nn/graph_model.h"

namespace lockstep {
namespace {

using nn_test::RefWindow;
using nn_test::Slice;
using nn_test::Vec;
using ::testing::HasSubstr;

ModelSpec Spec(const std::string& name, TensorShape input, int classes) {
  ModelSpec spec;
  spec.name = name;
  spec.input = input;
  spec.num_classes = classes;
  return spec;
}

std::map<std::string, std::vector<int64_t>> ShapesByName(
    const std::vector<TensorInfo>& tensors) {
  std::map<std::string, std::vector<int64_t>> m;
  for (const TensorInfo& t : tensors) m[t.name] = t.shape;
  return m;
}

class ModelsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Model> Make(const ModelSpec& spec, int max_batch) {
    auto model = CreateModel(spec, max_batch, device_.get());
    EXPECT_TRUE(model.ok()) << model.status();
    return model.ok() ? *std::move(model) : nullptr;
  }

  std::unique_ptr<Device> device_ = CpuDevice::Create(1);
};

TEST_F(ModelsTest, ResNet20CountsMatchKeras) {
  // Keras's cifar10_resnet resnet_v1(depth=20): 274,442 parameters, of
  // which 273,066 trainable. By hand: conv1 448 + bn 32; stage 1: 3 blocks
  // x 2 x (2,320 + 32); stage 2: 4,640 + 64 + 9,248 + 64 + 544 (shortcut)
  // + 2 x 2 x (9,248 + 64); stage 3: 18,496 + 128 + 36,928 + 128 + 2,112 +
  // 2 x 2 x (36,928 + 128); dense 650. Moving statistics: 2 x 688
  // channels.
  auto graph = BuildModelGraph(Spec("resnet20", {32, 32, 3}, 10));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->NumParameters(), 273066);
  EXPECT_EQ(graph->NumStates(), 1376);
  const auto shapes = ShapesByName(graph->Tensors());
  EXPECT_EQ(shapes.at("conv1/kernel"), (std::vector<int64_t>{3, 3, 3, 16}));
  EXPECT_EQ(shapes.at("stage2_block1_shortcut/kernel"),
            (std::vector<int64_t>{1, 1, 16, 32}));
  EXPECT_EQ(shapes.at("stage3_block3_conv2/kernel"),
            (std::vector<int64_t>{3, 3, 64, 64}));
  EXPECT_EQ(shapes.at("predictions/kernel"), (std::vector<int64_t>{64, 10}));
  EXPECT_EQ(graph->Tensors().back().name, "predictions/bias");
  int convs = 0;
  for (const auto& [name, shape] : shapes) {
    convs += shape.size() == 4 ? 1 : 0;
  }
  EXPECT_EQ(convs, 19 + 2);  // 19 3x3 + 2 projections.
  // 32 -> 16 -> 8 before the pooling.
  const auto& nodes = graph->nodes();
  EXPECT_EQ(nodes[nodes.size() - 3].layer->output_shape(),
            (TensorShape{8, 8, 64}));
}

TEST_F(ModelsTest, ResNet50CountsMatchKeras) {
  // Keras: ResNet50(weights=None, input_shape=(32, 32, 3), classes=10) has
  // 23,608,202 parameters, 23,555,082 trainable: 23,587,712 without the
  // top plus Dense(2048 -> 10) = 20,490; 53,120 moving statistics over
  // 26,560 batch-norm channels.
  auto graph = BuildModelGraph(Spec("resnet50", {32, 32, 3}, 10));
  ASSERT_TRUE(graph.ok()) << graph.status();
  EXPECT_EQ(graph->NumParameters(), 23555082);
  EXPECT_EQ(graph->NumStates(), 53120);
  EXPECT_EQ(graph->NumParameters() + graph->NumStates(), 23608202);
  // Keras's model has 177 layers, the InputLayer included.
  EXPECT_EQ(graph->nodes().size(), 176u);
  const auto tensors = graph->Tensors();
  EXPECT_EQ(tensors.front().name, "conv1_conv/kernel");
  EXPECT_EQ(tensors.front().shape, (std::vector<int64_t>{7, 7, 3, 64}));
  EXPECT_EQ(tensors.back().name, "predictions/bias");
  const auto shapes = ShapesByName(tensors);
  EXPECT_EQ(shapes.at("conv2_block1_0_conv/kernel"),
            (std::vector<int64_t>{1, 1, 64, 256}));
  EXPECT_EQ(shapes.at("conv3_block1_1_conv/kernel"),
            (std::vector<int64_t>{1, 1, 256, 128}));
  EXPECT_EQ(shapes.at("conv5_block3_3_bn/gamma"), (std::vector<int64_t>{2048}));
  EXPECT_EQ(shapes.at("predictions/kernel"), (std::vector<int64_t>{2048, 10}));
  // Keras's order within a projection block: the shortcut conv after the
  // second ReLU.
  std::vector<std::string> block;
  for (const GraphNode& node : graph->nodes()) {
    if (node.layer->name().rfind("conv3_block1_", 0) == 0) {
      block.push_back(node.layer->name().substr(13));
    }
  }
  EXPECT_EQ(block, (std::vector<std::string>{
                       "1_conv", "1_bn", "1_relu", "2_conv", "2_bn", "2_relu",
                       "0_conv", "3_conv", "0_bn", "3_bn", "add", "out"}));
  // 32x32: conv1 16x16, pool 8x8, then 8, 4, 2, 1.
  auto shape_of = [&](const std::string& name) {
    for (const GraphNode& node : graph->nodes()) {
      if (node.layer->name() == name) return node.layer->output_shape();
    }
    return TensorShape{0, 0, 0};
  };
  EXPECT_EQ(shape_of("conv1_relu"), (TensorShape{16, 16, 64}));
  EXPECT_EQ(shape_of("pool1_pool"), (TensorShape{8, 8, 64}));
  EXPECT_EQ(shape_of("conv2_block3_out"), (TensorShape{8, 8, 256}));
  EXPECT_EQ(shape_of("conv3_block4_out"), (TensorShape{4, 4, 512}));
  EXPECT_EQ(shape_of("conv4_block6_out"), (TensorShape{2, 2, 1024}));
  EXPECT_EQ(shape_of("conv5_block3_out"), (TensorShape{1, 1, 2048}));

  // ImageNet's 1000 classes: Keras's published 25,636,712 (25,583,592
  // trainable).
  auto imagenet = BuildModelGraph(Spec("resnet50", {32, 32, 3}, 1000));
  ASSERT_TRUE(imagenet.ok());
  EXPECT_EQ(imagenet->NumParameters(), 25583592);
  EXPECT_EQ(imagenet->NumParameters() + imagenet->NumStates(), 25636712);
}

TEST_F(ModelsTest, ResNet50ForwardOnOneImage) {
  auto model = Make(Spec("resnet50", {32, 32, 3}, 10), 1);
  ASSERT_NE(model, nullptr);
  EXPECT_EQ(model->NumParameters(), 23555082);
  EXPECT_EQ(model->StateSize(), 53120);
  ASSERT_TRUE(model->SetWeights(model->InitialWeights(1)).ok());
  const Dataset data = MakeSyntheticImages(2, {32, 32, 3}, 10, 2);
  auto stats = model->Evaluate(data.features, data.labels);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->examples, 2);
  EXPECT_TRUE(std::isfinite(stats->loss_sum));
  EXPECT_GT(stats->loss_sum, 0.0);
}

// The cnn in double: conv 5x5x6 valid, relu, pool 2, conv 5x5x16, relu,
// pool 2, flatten, dense 120, relu, dense 84, relu, dense classes.
double LeNetLoss(const Vec& p, int h, int w, int c, int classes,
                 const std::vector<float>& x,
                 const std::vector<int32_t>& labels) {
  const int n = static_cast<int>(labels.size());
  size_t o = 0;
  auto take = [&](size_t count) {
    Vec v = Slice(p, o, count);
    o += count;
    return v;
  };
  const RefWindow g1{n, h, w, c, 5, 5, 1, 1, 0, 0, h - 4, w - 4};
  const Vec k1 = take(25 * c * 6), b1 = take(6);
  Vec a =
      nn_test::RefRelu(nn_test::RefConv2D(nn_test::ToDouble(x), g1, k1, b1, 6));
  a = nn_test::RefMaxPoolValid(a, n, h - 4, w - 4, 6, 2);
  const int h2 = (h - 4) / 2, w2 = (w - 4) / 2;
  const RefWindow g2{n, h2, w2, 6, 5, 5, 1, 1, 0, 0, h2 - 4, w2 - 4};
  const Vec k2 = take(25 * 6 * 16), b2 = take(16);
  a = nn_test::RefRelu(nn_test::RefConv2D(a, g2, k2, b2, 16));
  a = nn_test::RefMaxPoolValid(a, n, h2 - 4, w2 - 4, 16, 2);
  const int flat = ((h2 - 4) / 2) * ((w2 - 4) / 2) * 16;
  const Vec k3 = take(flat * 120), b3 = take(120);
  a = nn_test::RefRelu(nn_test::RefDense(a, n, flat, k3, b3, 120));
  const Vec k4 = take(120 * 84), b4 = take(84);
  a = nn_test::RefRelu(nn_test::RefDense(a, n, 120, k4, b4, 84));
  const Vec k5 = take(84 * classes), b5 = take(classes);
  return nn_test::RefMeanCrossEntropy(
      nn_test::RefDense(a, n, 84, k5, b5, classes), n, classes, labels);
}

TEST_F(ModelsTest, CnnGradientsMatchFiniteDifferencesEndToEnd) {
  // 16x18 -> conv 12x14 -> pool 6x7 -> conv 2x3 -> pool 1x1 -> 16.
  const int h = 16, w = 18, c = 2, classes = 3, batch = 3;
  auto model = Make(Spec("cnn", {h, w, c}, classes), batch);
  ASSERT_NE(model, nullptr);
  const auto tensors = model->Tensors();
  ASSERT_EQ(tensors.size(), 10u);
  EXPECT_EQ(tensors[0].name, "conv2d_0/kernel");
  EXPECT_EQ(tensors[4].name, "dense_0/kernel");
  EXPECT_EQ(tensors[4].shape, (std::vector<int64_t>{16, 120}));
  EXPECT_EQ(model->NumParameters(), 306 + 2416 + 2040 + 10164 + 255);
  EXPECT_EQ(model->StateSize(), 0);

  std::vector<float> weights = model->InitialWeights(11);
  const auto noise = nn_test::RandomFloats(weights.size(), 12, -0.1f, 0.1f);
  for (size_t i = 0; i < weights.size(); ++i) weights[i] += noise[i];
  ASSERT_TRUE(model->SetWeights(weights).ok());
  const auto x = nn_test::RandomFloats(batch * h * w * c, 13);
  const std::vector<int32_t> y = {2, 0, 1};
  std::vector<float> grad(weights.size());
  auto stats = model->ComputeGradients(x, y, absl::MakeSpan(grad));
  ASSERT_TRUE(stats.ok()) << stats.status();
  const Vec wd = nn_test::ToDouble(weights);
  const double loss = LeNetLoss(wd, h, w, c, classes, x, y);
  EXPECT_NEAR(stats->loss_sum / batch, loss, 1e-5 * loss);

  // Central differences of the double network at ~40 parameters of every
  // tensor (all of the small ones).
  double scale = 0;
  for (float g : grad) scale = std::max(scale, std::abs(double{g}));
  ASSERT_GT(scale, 1e-3);
  int64_t offset = 0, checked = 0;
  for (const TensorInfo& t : tensors) {
    const int64_t n = t.NumElements();
    const int64_t step = std::max<int64_t>(1, n / 40);
    for (int64_t i = offset; i < offset + n; i += step, ++checked) {
      Vec plus = wd, minus = wd;
      const double e = 1e-6;
      plus[i] += e;
      minus[i] -= e;
      const double numeric = (LeNetLoss(plus, h, w, c, classes, x, y) -
                              LeNetLoss(minus, h, w, c, classes, x, y)) /
                             (2 * e);
      EXPECT_NEAR(grad[i], numeric, 1e-4 * scale)
          << t.name << " " << i - offset;
    }
    offset += n;
  }
  EXPECT_GE(checked, 300);
}

TEST_F(ModelsTest, ResNet20LearnsTinySyntheticData) {
  const int batch = 4;
  auto model = Make(Spec("resnet20", {8, 8, 3}, 10), batch);
  ASSERT_NE(model, nullptr);
  const Dataset data = MakeSyntheticImages(batch, {8, 8, 3}, 10, 5);
  std::vector<float> w = model->InitialWeights(3);
  std::vector<float> grad(w.size());
  double first = 0, last = 0;
  for (int step = 0; step < 12; ++step) {
    ASSERT_TRUE(model->SetWeights(w).ok());
    auto stats = model->ComputeGradients(data.features, data.labels,
                                         absl::MakeSpan(grad));
    ASSERT_TRUE(stats.ok()) << stats.status();
    ASSERT_TRUE(std::isfinite(stats->loss_sum));
    (step == 0 ? first : last) = stats->loss_sum / batch;
    for (size_t i = 0; i < w.size(); ++i) w[i] -= 0.1f * grad[i];
  }
  EXPECT_LT(last, 0.5 * first) << "first " << first << ", last " << last;
  // Twelve training steps moved the moving statistics off their start.
  std::vector<float> state(model->StateSize());
  ASSERT_TRUE(model->State(absl::MakeSpan(state)).ok());
  EXPECT_NE(state, model->InitialState());
}

TEST_F(ModelsTest, MlpByName) {
  ModelSpec spec = Spec("mlp", {28, 28, 1}, 10);
  spec.hidden_units = {32, 16};
  auto model = Make(spec, 8);
  ASSERT_NE(model, nullptr);
  const std::vector<TensorInfo> want = {
      {"dense_0/kernel", {784, 32}}, {"dense_0/bias", {32}},
      {"dense_1/kernel", {32, 16}},  {"dense_1/bias", {16}},
      {"dense_2/kernel", {16, 10}},  {"dense_2/bias", {10}}};
  EXPECT_EQ(model->Tensors(), want);
  EXPECT_EQ(model->FeatureSize(), 784);
  EXPECT_EQ(model->StateSize(), 0);
  EXPECT_TRUE(model->SetState({}).ok());
}

TEST_F(ModelsTest, BadNamesAndShapes) {
  auto unknown = CreateModel(Spec("vgg16", {32, 32, 3}, 10), 1, device_.get());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(),
              HasSubstr("mlp, cnn, resnet20, resnet50"));
  // LeNet's valid 5x5 convolutions need at least 16x16.
  auto small = CreateModel(Spec("cnn", {8, 8, 1}, 10), 1, device_.get());
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(small.status().message(), HasSubstr("cnn on input 8x8x1"));
  EXPECT_FALSE(BuildModelGraph(Spec("resnet20", {8, 8, 3}, 0)).ok());
  EXPECT_FALSE(BuildModelGraph(Spec("mlp", {8, 8, 3}, 10)).ok());
  EXPECT_EQ(ModelNames(),
            (std::vector<std::string>{"mlp", "cnn", "resnet20", "resnet50"}));
}

}  // namespace
}  // namespace lockstep
