// Conversion between ModelSignature and its wire form.
#ifndef LOCKSTEP_COMMON_MODEL_SIGNATURE_PROTO_H_
#define LOCKSTEP_COMMON_MODEL_SIGNATURE_PROTO_H_

#include "absl/status/statusor.h"
#include "common/model/model_signature.h"
#include "lockstep/v1/lockstep.pb.h"

namespace lockstep {

void SignatureToProto(const ModelSignature& signature,
                      v1::ModelSignature* proto);
// INVALID_ARGUMENT for a sync mode with no name it knows.
absl::StatusOr<ModelSignature> SignatureFromProto(
    const v1::ModelSignature& proto);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_MODEL_SIGNATURE_PROTO_H_
