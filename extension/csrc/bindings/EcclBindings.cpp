// The entry point behind torch_ember.distributed's backend creator: makes
// eccl's backend for torch.distributed and returns it as the Python object
// c10d expects (a torch._C._distributed_c10d.Backend). A C entry point, as
// the memory snapshot's, so that a chapter's plain library serves too.

#include "distributed/EcclBackend.h"

// ember-book: begin eccl_bindings
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/utils/pybind.h>

#include <chrono>

namespace {

// The Python class of eccl's backend: torch's Backend, plus `options`.
// c10d's split_group (what DeviceMesh calls for each dimension of a group
// made with device_id) deep-copies `backend.options`, which the Python
// classes of torch's own backends define and a plain Backend lacks. None
// makes ProcessGroup::splitGroup use the parent's own options,
// EcclBackend::getBackendOptions. Registered once, in a module of its own:
// torch's modules are torch's.
void registerPythonClass() {
  static PyModuleDef definition = {PyModuleDef_HEAD_INIT, "ember_eccl",
                                   nullptr, -1, nullptr};
  static const bool registered = [] {
    auto module = pybind11::module_::create_extension_module(
        "ember_eccl", nullptr, &definition);
    pybind11::class_<ember::eccl::EcclBackend, c10d::Backend,
                     c10::intrusive_ptr<ember::eccl::EcclBackend>>(
        module, "EcclBackend")
        .def_property_readonly("options", [](const pybind11::object&) {
          return pybind11::none();
        });
    return true;
  }();
  (void)registered;
}

} // namespace

// The backend is cast to the class above, whose base torch registered with
// pybind11: Python sees a c10d Backend whose calls land in EcclBackend.
extern "C" PyObject* emberEcclCreateBackend(PyObject* store, int rank,
                                            int size, double timeout_seconds) {
  HANDLE_TH_ERRORS
  registerPythonClass();
  auto c10d_store =
      pybind11::handle(store).cast<c10::intrusive_ptr<c10d::Store>>();
  const auto timeout = std::chrono::milliseconds(
      static_cast<int64_t>(timeout_seconds * 1000.0));
  c10::intrusive_ptr<c10d::Backend> backend;
  {
    // Rank 0 may take a while to publish the link in the store: wait for it
    // without holding the GIL.
    pybind11::gil_scoped_release no_gil;
    backend = c10::make_intrusive<ember::eccl::EcclBackend>(c10d_store, rank,
                                                           size, timeout);
  }
  return pybind11::cast(backend).release().ptr();
  END_HANDLE_TH_ERRORS
}
// ember-book: end eccl_bindings
