// Helpers for the tests of the CPU device's direct convolution kernels
// (worker/device/cpu/cpu_conv.h): a convolution's geometry written as its
// image, window, stride, padding and filters, and the fixture that skips
// where the processor has no AVX-512F.
#ifndef LOCKSTEP_TESTS_UNIT_CPU_CONV_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_CPU_CONV_TEST_UTIL_H_

#include <string>

#include "absl/strings/str_format.h"
#include "gtest/gtest.h"
#include "worker/device/cpu/cpu_conv.h"
#include "worker/device/image_geometry.h"

namespace lockstep {

// One convolution: an NHWC batch, its window, stride, padding on every
// side, and the filter count.
struct Case {
  int batch, height, width, channels;
  int window_height, window_width, stride_height, stride_width;
  int pad_top, pad_left, pad_bottom, pad_right;
  int filters;

  WindowGeometry Window() const {
    WindowGeometry g;
    g.input = {batch, height, width, channels};
    g.window_height = window_height;
    g.window_width = window_width;
    g.stride_height = stride_height;
    g.stride_width = stride_width;
    g.pad_top = pad_top;
    g.pad_left = pad_left;
    g.out_height =
        (height + pad_top + pad_bottom - window_height) / stride_height + 1;
    g.out_width =
        (width + pad_left + pad_right - window_width) / stride_width + 1;
    return g;
  }
  std::string Name() const {
    return absl::StrFormat(
        "%dx%dx%dx%d window %dx%d stride %dx%d pad t%d l%d b%d r%d filters %d",
        batch, height, width, channels, window_height, window_width,
        stride_height, stride_width, pad_top, pad_left, pad_bottom, pad_right,
        filters);
  }
};

// The kernels' scratch, shared as a device shares it.
class DirectConvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cpu_ops::DirectConvAvailable()) {
      GTEST_SKIP() << "this processor has no AVX-512F";
    }
  }

  cpu_ops::ConvScratch scratch_;  // shared by every case, as a device shares it
};

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_CPU_CONV_TEST_UTIL_H_
