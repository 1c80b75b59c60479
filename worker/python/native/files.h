// lockstep._native's weights files and data readers (files.cc).
#ifndef LOCKSTEP_WORKER_PYTHON_NATIVE_FILES_H_
#define LOCKSTEP_WORKER_PYTHON_NATIVE_FILES_H_

#include <pybind11/pybind11.h>

namespace lockstep {

// write_safetensors, read_safetensors, load_idx and load_cifar10.
void BindFiles(pybind11::module_& m);

}  // namespace lockstep

#endif  // LOCKSTEP_WORKER_PYTHON_NATIVE_FILES_H_
