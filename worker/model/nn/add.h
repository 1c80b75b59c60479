// Keras's Add of two tensors of one shape: the join of a residual block. Its
// backward pass hands the output gradient to both inputs. Externally
// synchronized.
#ifndef LOCKSTEP_WORKER_MODEL_NN_ADD_H_
#define LOCKSTEP_WORKER_MODEL_NN_ADD_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/model/nn/layer.h"

namespace lockstep {

class Add final : public Layer {
 public:
  // INVALID_ARGUMENT when the shapes differ (no broadcasting).
  static absl::StatusOr<std::unique_ptr<Add>> Create(std::string name,
                                                     const TensorShape& a,
                                                     const TensorShape& b);

 private:
  Add(std::string name, const TensorShape& shape);

  absl::Status RunForward(const ForwardArgs& args) override;
  absl::Status RunBackward(const BackwardArgs& args) override;
};

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_MODEL_NN_ADD_H_
