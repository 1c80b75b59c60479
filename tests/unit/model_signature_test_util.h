// The model signature the signature tests share.
#ifndef LOCKSTEP_TESTS_UNIT_MODEL_SIGNATURE_TEST_UTIL_H_
#define LOCKSTEP_TESTS_UNIT_MODEL_SIGNATURE_TEST_UTIL_H_

#include "common/model/model_signature.h"
#include "common/optim/optimizer.h"

namespace lockstep {

// A two-layer MLP for MNIST: 784 -> 128 -> 10, Adam, two workers.
inline ModelSignature Mlp() {
  ModelSignature s;
  s.tensors = {{"dense/kernel", {784, 128}},
               {"dense/bias", {128}},
               {"out/kernel", {128, 10}},
               {"out/bias", {10}}};
  s.optimizer = OptimizerConfig::Defaults("adam");
  s.num_workers = 2;
  return s;
}

}  // namespace lockstep

#endif  // LOCKSTEP_TESTS_UNIT_MODEL_SIGNATURE_TEST_UTIL_H_
