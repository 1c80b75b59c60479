// The safetensors file format (Hugging Face's): an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte
// range, then the tensors' bytes. Lockstep writes a model's weights in it
// (keyed by tensor name, every tensor float32, in signature order) so that
// PyTorch, Keras or any other tool can read a model trained with Lockstep,
// and reads such a file back into a model's flat weights.
//
// Free functions over plain values; thread-compatible.
#ifndef LOCKSTEP_COMMON_FORMATS_SAFETENSORS_H_
#define LOCKSTEP_COMMON_FORMATS_SAFETENSORS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/env.h"
#include "common/model/model_signature.h"

namespace lockstep {

// The largest header a reader accepts (the format's own limit is 100 MB).
inline constexpr int64_t kMaxSafetensorsHeaderBytes = int64_t{100} << 20;

// One float32 tensor read from a file.
struct NamedTensor {
  TensorInfo info;
  std::vector<float> values;
};

// The file's bytes for `tensors`, whose values lie one after another in
// `flat` (the flat layout of a model signature). INVALID_ARGUMENT when the
// sizes disagree, a name is empty or repeated.
absl::StatusOr<std::string> EncodeSafetensors(
    const std::vector<TensorInfo>& tensors, absl::Span<const float> flat);

// EncodeSafetensors, written to `path` through `env` with
// WriteFileAtomically: `path` is never half written, and a failed write
// leaves it as it was.
absl::Status WriteSafetensors(const std::string& path,
                              const std::vector<TensorInfo>& tensors,
                              absl::Span<const float> flat,
                              Env* env = Env::Default());

// The tensors of a safetensors file's bytes, in the order of their data.
// INVALID_ARGUMENT (DATA_LOSS for a truncated file) naming what is wrong: a
// header that is not JSON or over kMaxSafetensorsHeaderBytes, a dtype other
// than F32, a shape that disagrees with its byte range, ranges that overlap,
// leave gaps or do not end where the file does.
absl::StatusOr<std::vector<NamedTensor>> DecodeSafetensors(
    const std::string& bytes);

// DecodeSafetensors of the file at `path`, read through `env` (NOT_FOUND
// when it is missing); every error names `path`.
absl::StatusOr<std::vector<NamedTensor>> ReadSafetensors(
    const std::string& path, Env* env = Env::Default());

// The flat layout of `tensors` filled from `file` by name. Tensors of the
// file the model lacks are ignored; FAILED_PRECONDITION names the first
// model tensor the file lacks or holds with another shape.
absl::StatusOr<std::vector<float>> FlattenByName(
    const std::vector<TensorInfo>& tensors,
    const std::vector<NamedTensor>& file);

}  // namespace lockstep

#endif  // LOCKSTEP_COMMON_FORMATS_SAFETENSORS_H_
