// Copies from a device to the host on both devices ("cpu", "cuda"; the
// CUDA runs skip themselves without a GPU): asynchronous copies, the copy
// marks that wait for some of them, GradientHandOff, which hands a
// model's gradient to its pushes piece by piece during backprop, and
// HostUploader, which uploads a model's weights.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/gpu/cuda_test_util.h"
#include "worker/device/gradient_hand_off.h"
#include "worker/device/host_uploader.h"

namespace lockstep {
namespace {

using cuda_test::DeviceTest;
using cuda_test::Download;
using cuda_test::RandomFloats;
using cuda_test::Upload;

TEST_P(DeviceTest, AsyncCopyLandsAfterSynchronize) {
  const std::vector<float> values = RandomFloats(777, 1);
  auto buffer = Upload(*device_, values);
  auto host = device_->AllocateHost(values.size() * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  // Two pieces, as Mlp copies one layer at a time.
  ASSERT_TRUE(device_
                  ->CopyToHostAsync(buffer->As<float>() + 300,
                                    (*host)->As<float>() + 300,
                                    477 * sizeof(float))
                  .ok());
  ASSERT_TRUE(device_
                  ->CopyToHostAsync(buffer->data(), (*host)->data(),
                                    300 * sizeof(float))
                  .ok());
  ASSERT_TRUE(device_->Synchronize().ok());
  const float* got = (*host)->As<float>();
  EXPECT_EQ(std::vector<float>(got, got + values.size()), values);
}

// A copy mark covers the copies queued before it: once WaitForCopies
// returns they are on the host, and CopiesDone says so. Marks end at
// Synchronize.
TEST_P(DeviceTest, CopyMarksWaitForTheCopiesBeforeThem) {
  const std::vector<float> values = RandomFloats(777, 2);
  auto buffer = Upload(*device_, values);
  auto host = device_->AllocateHost(values.size() * sizeof(float));
  ASSERT_TRUE(host.ok()) << host.status();
  float* got = (*host)->As<float>();
  ASSERT_TRUE(
      device_->CopyToHostAsync(buffer->data(), got, 300 * sizeof(float)).ok());
  absl::StatusOr<uint64_t> first = device_->MarkCopies();
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(device_
                  ->CopyToHostAsync(buffer->As<float>() + 300, got + 300,
                                    477 * sizeof(float))
                  .ok());
  absl::StatusOr<uint64_t> second = device_->MarkCopies();
  ASSERT_TRUE(second.ok()) << second.status();

  ASSERT_TRUE(device_->WaitForCopies(*first).ok());
  EXPECT_EQ(std::vector<float>(got, got + 300),
            std::vector<float>(values.begin(), values.begin() + 300));
  absl::StatusOr<bool> done = device_->CopiesDone(*first);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);
  ASSERT_TRUE(device_->WaitForCopies(*second).ok());
  EXPECT_EQ(std::vector<float>(got, got + values.size()), values);
  done = device_->CopiesDone(*second);
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_TRUE(*done);

  ASSERT_TRUE(device_->Synchronize().ok());
  if (GetParam() == "cuda") {
    EXPECT_EQ(*first, 0u);
    EXPECT_EQ(*second, 1u);
    EXPECT_TRUE(absl::IsInvalidArgument(device_->WaitForCopies(*second)));
    EXPECT_TRUE(absl::IsInvalidArgument(device_->CopiesDone(0).status()));
  }
}

// The pieces of a gradient go to on_ready in the order backprop queued
// them, each holding its final values; on the CPU device each goes out
// within its own Copy, while the next layer would compute. Without
// on_ready, Finish brings the whole gradient.
TEST_P(DeviceTest, GradientHandOffHandsPiecesOverInOrder) {
  const std::vector<float> values = RandomFloats(1000, 3);
  auto buffer = Upload(*device_, values);
  // Null on the CPU device: its pieces are copied straight out, once.
  auto staging = GradientHandOff::AllocateStaging(device_.get(), values.size());
  ASSERT_TRUE(staging.ok()) << staging.status();
  EXPECT_EQ(*staging == nullptr, GetParam() == "cpu");
  std::vector<float> gradient(values.size(), -7.0f);
  std::vector<std::pair<int64_t, int64_t>> seen;
  const GradientHandOff::ReadyFn on_ready = [&](int64_t begin, int64_t end) {
    EXPECT_EQ(
        std::vector<float>(gradient.begin() + begin, gradient.begin() + end),
        std::vector<float>(values.begin() + begin, values.begin() + end));
    seen.emplace_back(begin, end);
  };
  GradientHandOff hand_off(device_.get(), buffer->As<float>(), staging->get(),
                           absl::MakeSpan(gradient), on_ready);
  // The last layer first; a layer without parameters is an empty piece.
  const std::vector<std::pair<int64_t, int64_t>> pieces = {
      {600, 1000}, {600, 600}, {250, 600}, {0, 250}};
  size_t queued = 0;
  for (const auto& [begin, end] : pieces) {
    ASSERT_TRUE(hand_off.Copy(begin, end).ok());
    if (end > begin) ++queued;
    if (GetParam() == "cpu") {
      EXPECT_EQ(seen.size(), queued);
    }
  }
  ASSERT_TRUE(hand_off.Finish().ok());
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{
                      {600, 1000}, {250, 600}, {0, 250}}));
  EXPECT_EQ(gradient, values);

  std::vector<float> whole(values.size(), -7.0f);
  GradientHandOff at_once(device_.get(), buffer->As<float>(), staging->get(),
                          absl::MakeSpan(whole), nullptr);
  ASSERT_TRUE(at_once.Copy(500, 1000).ok());
  ASSERT_TRUE(at_once.Copy(0, 500).ok());
  ASSERT_TRUE(at_once.Finish().ok());
  EXPECT_EQ(whole, values);
}

// Values kept in the lent buffer and values anywhere else reach the device
// alike; the uploader never writes the lent buffer, and refuses more than
// its size. The CPU device lends nothing: its upload is one copy anyway.
TEST_P(DeviceTest, HostUploaderUploadsFromTheLentBufferAndFromAnywhere) {
  constexpr size_t kFloats = 1000;
  HostUploader uploader(device_.get(), kFloats);
  absl::StatusOr<absl::Span<float>> lent = uploader.Lend();
  ASSERT_TRUE(lent.ok()) << lent.status();
  auto target = device_->Allocate(kFloats * sizeof(float));
  ASSERT_TRUE(target.ok()) << target.status();

  const std::vector<float> elsewhere = RandomFloats(kFloats, 3);
  if (GetParam() == "cpu") {
    EXPECT_TRUE(lent->empty());
  } else {
    ASSERT_EQ(lent->size(), kFloats);
    absl::StatusOr<absl::Span<float>> again = uploader.Lend();
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->data(), lent->data());
    const std::vector<float> kept = RandomFloats(kFloats, 4);
    std::copy(kept.begin(), kept.end(), lent->begin());
    ASSERT_TRUE(uploader.Upload(*lent, (*target)->data()).ok());
    EXPECT_EQ(Download<float>(*device_, **target), kept);
    // A part of the lent buffer is read in place too.
    ASSERT_TRUE(uploader.Upload(lent->subspan(10, 20), (*target)->data()).ok());
    std::vector<float> want = kept;
    std::copy(kept.begin() + 10, kept.begin() + 30, want.begin());
    EXPECT_EQ(Download<float>(*device_, **target), want);
    // Staging another span leaves the lent buffer as its owner left it.
    ASSERT_TRUE(uploader.Upload(elsewhere, (*target)->data()).ok());
    EXPECT_EQ(std::vector<float>(lent->begin(), lent->end()), kept);
  }
  ASSERT_TRUE(uploader.Upload(elsewhere, (*target)->data()).ok());
  EXPECT_EQ(Download<float>(*device_, **target), elsewhere);
  const std::vector<float> too_many(kFloats + 1, 1.0f);
  EXPECT_EQ(uploader.Upload(too_many, (*target)->data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(uploader.Upload({}, (*target)->data()).ok());
}

// DeviceTest's tests here run on both devices through cuda_device_test.cc's
// BothDevices instantiation: the two files share one test executable, and a
// second instantiation would run every DeviceTest twice.

}  // namespace
}  // namespace lockstep
