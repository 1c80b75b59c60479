// What the ParameterServer tests share.
#ifndef LOCKSTEP_TESTS_UNIT_PARAMETER_SERVER_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_PARAMETER_SERVER_TEST_UTIL_H_

#include <cstdint>

#include "common/model/model_signature.h"

namespace lockstep {

// A model of two tensors, 3 + 2 = 5 parameters, trained with plain SGD.
inline ModelSignature SmallSignature(int workers, int64_t chunk_bytes = 1 << 20) {
  ModelSignature s;
  s.tensors = {{"dense_0/kernel", {3}}, {"dense_0/bias", {2}}};
  s.optimizer = OptimizerConfig::Defaults("sgd");
  s.optimizer.learning_rate = 0.5;
  s.chunk_bytes = chunk_bytes;
  s.num_workers = workers;
  return s;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_PARAMETER_SERVER_TEST_UTIL_H_
