// --validation_split's hold-out: Keras's count, and the last examples (in
// the data set's order) moved out of the training set.
#include "worker/data/validation_split.h"

#include <vector>

#include "gtest/gtest.h"

namespace lockstep {
namespace {

TEST(ValidationSplitTest, HoldsOutKerasCount) {
  EXPECT_EQ(ValidationExamples(100, 0.2), 20);
  EXPECT_EQ(ValidationExamples(6400, 0.1), 640);
  EXPECT_EQ(ValidationExamples(1000, 0.3), 300);
  // 10 * (1 - 0.7) is 3.0000000000000004: Keras trains on 3, holds out 7.
  EXPECT_EQ(ValidationExamples(10, 0.7), 7);
  EXPECT_EQ(ValidationExamples(7, 0.5), 4);  // floor(3.5) kept.
  EXPECT_EQ(ValidationExamples(3, 0.1), 1);  // floor(2.7) kept.
}

Dataset Numbered(int64_t n) {
  Dataset data;
  data.num_examples = n;
  data.feature_dim = 2;
  data.num_classes = 10;
  for (int64_t i = 0; i < n; ++i) {
    data.features.push_back(static_cast<float>(i));
    data.features.push_back(static_cast<float>(-i));
    data.labels.push_back(static_cast<int32_t>(i % 10));
  }
  return data;
}

TEST(ValidationSplitTest, MovesTheLastExamples) {
  Dataset train = Numbered(10);
  absl::StatusOr<Dataset> validation = SplitValidation(0.3, "--split", &train);
  ASSERT_TRUE(validation.ok()) << validation.status();
  EXPECT_EQ(train.num_examples, 7);
  EXPECT_EQ(train.features, (std::vector<float>{0, 0, 1, -1, 2, -2, 3, -3, 4,
                                                -4, 5, -5, 6, -6}));
  EXPECT_EQ(train.labels, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(validation->num_examples, 3);
  EXPECT_EQ(validation->feature_dim, 2);
  EXPECT_EQ(validation->num_classes, 10);
  EXPECT_EQ(validation->features, (std::vector<float>{7, -7, 8, -8, 9, -9}));
  EXPECT_EQ(validation->labels, (std::vector<int32_t>{7, 8, 9}));
}

TEST(ValidationSplitTest, RefusesFractionsOutsideTheOpenInterval) {
  for (double fraction : {0.0, 1.0, -0.1, 1.5}) {
    Dataset train = Numbered(10);
    absl::StatusOr<Dataset> validation =
        SplitValidation(fraction, "--validation_split", &train);
    ASSERT_FALSE(validation.ok()) << fraction;
    EXPECT_EQ(validation.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(train.num_examples, 10) << "untouched";
  }
  Dataset train = Numbered(10);
  EXPECT_EQ(
      SplitValidation(-0.5, "--validation_split", &train).status().message(),
      "--validation_split must be in (0, 1), got -0.5");
}

TEST(ValidationSplitTest, RefusesASplitThatLeavesAPartEmpty) {
  Dataset train = Numbered(1);
  absl::StatusOr<Dataset> validation =
      SplitValidation(0.5, "--validation_split", &train);
  ASSERT_FALSE(validation.ok());
  EXPECT_EQ(validation.status().message(),
            "the training data has 1 examples, too few to hold out "
            "--validation_split=0.5 of them and train on the rest");
  EXPECT_EQ(train.num_examples, 1);
}

}  // namespace
}  // namespace lockstep
