// torch_ember._C: the compiled backend, as a Python extension module.
//
// Loading this module is what registers the backend: the allocator, the
// device guard and every kernel under csrc/ register themselves from static
// initializers when the shared library is loaded. Python needs no bindings on
// top of that: the device module (torch_ember/device_module.py) calls the
// driver's C API, which is compiled into this library, through ctypes, the
// same way the book's chapters do.
//
// Not shown in the book: the chapters load their backend with load_inline.
// Plain pybind11, not <torch/extension.h>: nothing here exchanges tensors.
#include <pybind11/pybind11.h>

PYBIND11_MODULE(_C, m) {
  m.doc() = "The ember backend for PyTorch (use `import torch_ember`).";
}
