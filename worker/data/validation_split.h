// Keras's validation_split: the last fraction F of the training examples,
// in the order the data set holds them (before the per-epoch shuffle and
// before sharding), is held out of training and evaluated instead. Every
// worker loads the whole training set, so every worker holds out the same
// examples, and the sampler shards and shuffles only the rest.
#ifndef LOCKSTEP_WORKER_DATA_VALIDATION_SPLIT_H_
#define LOCKSTEP_WORKER_DATA_VALIDATION_SPLIT_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "worker/data/dataset.h"

namespace lockstep {

// How many of `num_examples` a fraction holds out, as Keras counts them:
// num_examples - floor(num_examples * (1 - fraction)).
int64_t ValidationExamples(int64_t num_examples, double fraction);

// Moves the held-out last examples of *train into the returned set (same
// feature_dim and num_classes). INVALID_ARGUMENT unless 0 < fraction < 1
// and both parts keep at least one example; `what` names the option in
// the message.
absl::StatusOr<Dataset> SplitValidation(double fraction, const char* what,
                                        Dataset* train);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_DATA_VALIDATION_SPLIT_H_
