// The convolutional models on the CPU device with its direct AVX-512
// convolutions (worker/device/cpu/cpu_conv.h) against the same models computed
// with im2col + OpenBLAS: the same weights, state and batch give the same loss,
// gradients and moving statistics, and a few SGD steps stay together. The
// kernels themselves are checked against the definition in cpu_conv_test;
// this shows Conv2D routes every pass through them correctly. The direct
// device here uses them for every convolution, ResNet-50's 2x2 and 1x1 maps
// included, where the default device keeps im2col.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "tests/unit/model_agreement.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/cpu/cpu_device.h"
#include "worker/model/model.h"
#include "worker/model/models.h"

namespace lockstep {
namespace {

using agreement::ModelCase;

class CpuConvModelsTest : public ::testing::TestWithParam<ModelCase> {
 protected:
  void SetUp() override {
    if (!cpu_ops::DirectConvAvailable()) {
      GTEST_SKIP() << "this processor has no AVX-512F";
    }
    ASSERT_EQ(direct_->Name(),
              "cpu (OpenBLAS, 1 thread, AVX-512 convolutions only)");
    ASSERT_EQ(im2col_->Name(), "cpu (OpenBLAS, 1 thread)");
    ModelSpec spec;
    spec.name = GetParam().model;
    spec.input = GetParam().input;
    auto want = CreateModel(spec, GetParam().batch, im2col_.get());
    auto got = CreateModel(spec, GetParam().batch, direct_.get());
    ASSERT_TRUE(want.ok()) << want.status();
    ASSERT_TRUE(got.ok()) << got.status();
    want_ = std::move(*want);
    got_ = std::move(*got);
  }

  std::unique_ptr<Device> im2col_ = CpuDevice::Create(1, CpuConv::kIm2Col);
  std::unique_ptr<Device> direct_ = CpuDevice::Create(1, CpuConv::kDirect);
  std::unique_ptr<Model> want_, got_;
};

TEST_P(CpuConvModelsTest, DirectConvolutionsTrainAsIm2ColDoes) {
  agreement::ExpectModelsAgree(*want_, *got_, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Models, CpuConvModelsTest,
                         ::testing::ValuesIn(agreement::ConvModelCases()),
                         agreement::ModelCaseName);

}  // namespace
}  // namespace lockstep
