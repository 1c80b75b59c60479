// Conversions at the one boundary between Lockstep and Python: a failed
// absl::Status becomes a C++ exception that module.cc's translator turns
// into lockstep.errors.LockstepError, Python buffers become spans, and
// values going back become numpy arrays. Call with the GIL held.
#ifndef LOCKSTEP_WORKER_PYTHON_NATIVE_CONVERSIONS_H_
#define LOCKSTEP_WORKER_PYTHON_NATIVE_CONVERSIONS_H_

#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/model/model_signature.h"

namespace lockstep {

// A failed absl::Status on its way to Python.
struct StatusError {
  absl::Status status;
};

inline void ThrowIfError(const absl::Status& status) {
  if (!status.ok()) throw StatusError{status};
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  ThrowIfError(value.status());
  return *std::move(value);
}

// gRPC's and absl's shared code names ("UNAVAILABLE").
std::string CodeName(absl::StatusCode code);

// A float32 buffer viewed as a flat span: C-contiguous, any shape. Holds
// the buffer (and so the object exporting it) while it lives.
struct FloatBuffer {
  std::unique_ptr<pybind11::buffer_info> info;
  absl::Span<float> span;
};

// TypeError unless `buffer` holds float32, ValueError unless it is
// C-contiguous; BufferError when `writable` and it is read-only. `what`
// names it in the message.
FloatBuffer RequestFloats(const pybind11::buffer& buffer, bool writable,
                          const char* what);

// A new numpy array of `dtype` ("float32", "int32", "int64": native byte
// order) shaped `shape`, holding a copy of the `bytes` bytes at `data`. It
// is numpy.frombuffer over a bytearray, made through Python calls alone:
// the module never touches numpy's C structures, whose layout changed in
// numpy 2 (pybind11 before 2.12 made arrays with wrong strides there), so
// the arrays are right under numpy 1 and 2 whichever pybind11 built it.
// Writable and C-contiguous; the bytearray is the array's base.
pybind11::object NumpyArray(const void* data, size_t bytes, const char* dtype,
                            const std::vector<int64_t>& shape);

using NamedShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

// [(name, shape)] as the signature's tensors.
std::vector<TensorInfo> Tensors(const NamedShapes& list);

// A learning-rate schedule from its dict, checked (throws StatusError):
// the keys are lockstep_worker's --lr_* flags without "lr_".
LrSchedule ScheduleFromDict(const pybind11::dict& d);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PYTHON_NATIVE_CONVERSIONS_H_
