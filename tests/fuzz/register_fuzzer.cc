// libFuzzer target: a RegisterRequest from arbitrary bytes through what the
// server does with it -- SignatureFromProto, ValidateSignature (the bounds
// checked before anything is allocated), DescribeDifference, ChunkPlan and
// a fresh ParameterServer core's Register.
#include <google/protobuf/stubs/logging.h>

#include <cstddef>
#include <cstdint>

#include "common/model/chunk_plan.h"
#include "common/model/model_signature.h"
#include "common/model/signature_limits.h"
#include "common/model/signature_proto.h"
#include "lockstep/v1/lockstep.pb.h"
#include "server/core/parameter_server.h"

// Protobuf logs every string field that is not UTF-8; fuzzing makes many.
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lockstep::v1::RegisterRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const absl::StatusOr<lockstep::ModelSignature> parsed =
      lockstep::SignatureFromProto(request.signature());
  if (!parsed.ok()) return 0;
  const lockstep::ModelSignature& signature = *parsed;
  lockstep::SignatureLimits limits;
  limits.max_parameters = 1 << 16;  // Keep each run's model small.
  limits.max_chunks = 1 << 12;
  if (!lockstep::ValidateSignature(signature, limits).ok()) return 0;

  // Past validation nothing may overflow or allocate beyond the limits.
  const int64_t parameters = signature.NumParameters();
  const int64_t state = signature.NumStateElements();
  if (parameters < 1 || state < 0 ||
      parameters + state > limits.max_parameters) {
    __builtin_trap();
  }
  lockstep::ModelSignature reference;
  reference.tensors = {{"dense/kernel", {4, 3}}, {"dense/bias", {3}}};
  (void)lockstep::DescribeDifference(reference, signature);
  (void)lockstep::DescribeDifference(signature, reference);
  absl::StatusOr<lockstep::ChunkPlan> plan = lockstep::ChunkPlan::Create(
      parameters, signature.chunk_bytes, signature.num_shards, state);
  if (!plan.ok() || plan->num_chunks() > limits.max_chunks) __builtin_trap();

  lockstep::ParameterServerOptions options;
  options.num_workers = 2;
  options.num_shards = signature.num_shards;
  auto core = lockstep::ParameterServer::Create(options);
  if (!core.ok()) return 0;
  (void)(*core)->Register(request.rank(), signature);
  (void)(*core)->GetStatus();
  return 0;
}
