// lockstep._native's files: weights files (safetensors) and the data
// readers, as numpy arrays (module.cc binds the rest).
#include "worker/python/native/files.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/formats/safetensors.h"
#include "worker/data/cifar_reader.h"
#include "worker/data/dataset.h"
#include "worker/python/native/conversions.h"

namespace py = pybind11;

namespace lockstep {
namespace {

// Weights files (common/formats/safetensors.h).
void BindSafetensors(py::module_& m) {
  m.def(
      "write_safetensors",
      [](const std::string& path,
         const std::vector<std::pair<std::string, std::vector<int64_t>>>&
             tensors,
         const py::buffer& flat) {
        FloatBuffer f = RequestFloats(flat, /*writable=*/false, "flat");
        ThrowIfError(WriteSafetensors(path, Tensors(tensors), f.span));
      },
      py::arg("path"), py::arg("tensors"), py::arg("flat"));

  m.def(
      "read_safetensors",
      [](const std::string& path) {
        std::vector<NamedTensor> tensors = ValueOrThrow(ReadSafetensors(path));
        py::list out;
        for (NamedTensor& t : tensors) {
          py::object values =
              NumpyArray(t.values.data(), t.values.size() * sizeof(float),
                         "float32", {static_cast<int64_t>(t.values.size())});
          out.append(py::make_tuple(t.info.name, t.info.shape, values));
        }
        return out;
      },
      py::arg("path"));
}

// The data readers, as numpy arrays.
void BindData(py::module_& m) {
  // A data set as numpy arrays: features shaped `shape` after the count.
  auto to_arrays = [](const Dataset& data, std::vector<int64_t> shape) {
    shape.insert(shape.begin(), data.num_examples);
    return py::make_tuple(
        NumpyArray(data.features.data(), data.features.size() * sizeof(float),
                   "float32", shape),
        NumpyArray(data.labels.data(), data.labels.size() * sizeof(int32_t),
                   "int32", {data.num_examples}));
  };
  m.def(
      "load_idx",
      [to_arrays](const std::string& dir, bool train) {
        Dataset data;
        {
          py::gil_scoped_release release;
          data = ValueOrThrow(LoadIdxDataset(dir, train));
        }
        return to_arrays(data, {data.feature_dim});
      },
      py::arg("dir"), py::arg("train"),
      "The IDX (MNIST-format) split in dir as lockstep_worker reads it: "
      "features scaled to [0, 1], shape (N, 784), and int32 labels.");
  m.def(
      "load_cifar10",
      [to_arrays](const std::string& dir, bool train) {
        Dataset data;
        {
          py::gil_scoped_release release;
          data = ValueOrThrow(LoadCifar10(dir, train));
        }
        return to_arrays(data, {kCifarHeight, kCifarWidth, kCifarChannels});
      },
      py::arg("dir"), py::arg("train"),
      "CIFAR-10's binary files in dir as lockstep_worker reads them: images "
      "(N, 32, 32, 3), normalized per channel, and int32 labels.");
}

}  // namespace

void BindFiles(py::module_& m) {
  BindSafetensors(m);
  BindData(m);
}

}  // namespace lockstep
