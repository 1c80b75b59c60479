#include "worker/python/native/conversions.h"

#include <pybind11/stl.h>

#include <cctype>

#include "absl/strings/str_cat.h"
#include "common/optim/lr_schedule.h"

namespace lockstep {

namespace py = pybind11;

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) {
    c = c == ' '
            ? '_'
            : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return name;
}

FloatBuffer RequestFloats(const py::buffer& buffer, bool writable,
                          const char* what) {
  FloatBuffer out;
  out.info = std::make_unique<py::buffer_info>(buffer.request(writable));
  const py::buffer_info& info = *out.info;
  if (info.itemsize != 4 ||
      (info.format != "f" && info.format != "<f" && info.format != "=f")) {
    throw py::type_error(absl::StrCat(
        what, ": needs float32 values, got format '", info.format, "'"));
  }
  int64_t expect = info.itemsize;
  for (int64_t d = info.ndim - 1; d >= 0; --d) {
    if (info.shape[d] > 1 && info.strides[d] != expect) {
      throw py::value_error(absl::StrCat(what, ": needs a C-contiguous array"));
    }
    expect *= info.shape[d];
  }
  out.span = absl::MakeSpan(static_cast<float*>(info.ptr),
                            static_cast<size_t>(info.size));
  return out;
}

py::object NumpyArray(const void* data, size_t bytes, const char* dtype,
                      const std::vector<int64_t>& shape) {
  py::object buffer =
      py::reinterpret_steal<py::object>(PyByteArray_FromStringAndSize(
          static_cast<const char*>(data), static_cast<Py_ssize_t>(bytes)));
  if (!buffer) throw py::error_already_set();
  py::module_ numpy = py::module_::import("numpy");
  py::object flat = numpy.attr("frombuffer")(buffer, py::arg("dtype") = dtype);
  py::tuple dims(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) dims[i] = py::int_(shape[i]);
  return flat.attr("reshape")(dims);
}

std::vector<TensorInfo> Tensors(const NamedShapes& list) {
  std::vector<TensorInfo> out;
  for (const auto& [name, shape] : list) out.push_back({name, shape});
  return out;
}

// A learning-rate schedule from its dict, checked: the keys are
// lockstep_worker's --lr_* flags without "lr_" ("schedule" is the kind, the
// others LrSchedule's fields); absent ones keep their defaults.
LrSchedule ScheduleFromDict(const py::dict& d) {
  LrSchedule s;
  for (auto item : d) {
    const std::string key = py::cast<std::string>(item.first);
    const py::handle v = item.second;
    if (key == "schedule") {
      s.kind = py::cast<std::string>(v);
    } else if (key == "decay_steps") {
      s.decay_steps = py::cast<int64_t>(v);
    } else if (key == "decay_rate") {
      s.decay_rate = py::cast<double>(v);
    } else if (key == "staircase") {
      s.staircase = py::cast<bool>(v);
    } else if (key == "boundaries") {
      s.boundaries = py::cast<std::vector<int64_t>>(v);
    } else if (key == "values") {
      s.values = py::cast<std::vector<double>>(v);
    } else if (key == "alpha") {
      s.alpha = py::cast<double>(v);
    } else if (key == "warmup_steps") {
      s.warmup_steps = py::cast<int64_t>(v);
    } else if (key == "warmup_from") {
      s.warmup_from = py::cast<double>(v);
    } else {
      ThrowIfError(absl::InvalidArgumentError("lr_schedule has no setting \"" +
                                              key + "\""));
    }
  }
  ThrowIfError(ValidateLrSchedule(s));
  return s;
}

}  // namespace lockstep
