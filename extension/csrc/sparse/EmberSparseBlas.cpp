// Sparse @ dense on ember: mm, addmm and torch.sparse.mm of a COO matrix and
// a dense one. The product itself is the CPU's kernel on host views
// (EmberSparseHost.h), writing into an ember result in place: no copy of the
// inputs or of the result.
#include "sparse/EmberSparseGuard.h"
#include "sparse/EmberSparseHost.h"

// ember-book: begin sparse_addmm
#include <ATen/core/Tensor.h>
#include <ATen/ops/_sparse_mm_native.h>
#include <ATen/ops/mm_native.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Scalar.h>
#include <torch/library.h>

namespace ember::sparse {
namespace {

// addmm(t, sparse, dense): the result allocated on ember at its final size,
// then addmm.out (the CPU's kernel, below). The CPU's functional kernel
// would allocate it in host memory, to be copied after the launch; and a
// host view of an out= tensor cannot grow, so the CPU's kernel gets one of
// the right size. A malformed call gets an empty result, which the CPU's
// kernel refuses in its words after checking the arguments.
at::Tensor addmm(const at::Tensor& self, const at::Tensor& mat1,
                 const at::Tensor& mat2, const at::Scalar& beta,
                 const at::Scalar& alpha) {
  const c10::OptionalDeviceGuard guard(self.device());
  const bool matrices = mat1.dim() == 2 && mat2.dim() == 2;
  at::Tensor out = at::empty(
      matrices ? std::vector<int64_t>{mat1.size(0), mat2.size(1)}
               : std::vector<int64_t>{0},
      self.options().layout(at::kStrided));
  return at::addmm_out(out, self, mat1, mat2, beta, alpha);
}

} // namespace
} // namespace ember::sparse

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // mm and torch.sparse.mm: zeros, then addmm with beta 0 (PyTorch's
  // device-generic kernel, which SparseCUDA registers too).
  using MatMul = at::Tensor(const at::Tensor&, const at::Tensor&);
  m.impl("mm", EMBER_SPARSE_ON_DEVICE(MatMul, at::native::_sparse_mm));
  m.impl("mm.out", EMBER_SPARSE_GUARDED(at::native::_sparse_mm_out));
  m.impl("addmm", TORCH_FN(ember::sparse::addmm));
  // The products: the CPU's kernels, on host views.
  m.impl("addmm.out", ember::sparse::hostKernel());
  m.impl("addmm_", ember::sparse::hostKernel());
}
// ember-book: end sparse_addmm
