#include "worker/data/validation_split.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace lockstep {

int64_t ValidationExamples(int64_t num_examples, double fraction) {
  const double kept =
      std::floor(static_cast<double>(num_examples) * (1.0 - fraction));
  return num_examples - static_cast<int64_t>(kept);
}

absl::StatusOr<Dataset> SplitValidation(double fraction, const char* what,
                                        Dataset* train) {
  if (!(fraction > 0 && fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be in (0, 1), got ", fraction));
  }
  const int64_t held_out = ValidationExamples(train->num_examples, fraction);
  const int64_t kept = train->num_examples - held_out;
  if (held_out < 1 || kept < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the training data has ", train->num_examples,
                     " examples, too few to hold out ", what, "=", fraction,
                     " of them and train on the rest"));
  }
  Dataset validation;
  validation.num_examples = held_out;
  validation.feature_dim = train->feature_dim;
  validation.num_classes = train->num_classes;
  const auto feature_split =
      train->features.begin() + kept * train->feature_dim;
  validation.features.assign(feature_split, train->features.end());
  validation.labels.assign(train->labels.begin() + kept, train->labels.end());
  train->features.erase(feature_split, train->features.end());
  train->labels.erase(train->labels.begin() + kept, train->labels.end());
  train->features.shrink_to_fit();
  train->labels.shrink_to_fit();
  train->num_examples = kept;
  return validation;
}

}  // namespace lockstep
