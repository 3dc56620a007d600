// Sparse COO tensors on ember: the SparsePrivateUse1 ("Sparseember") row of
// the dispatch table. Two kinds of cells:
// - structure (constructors, members, flags, copies): PyTorch's own kernels,
//   the ones SparseCUDA registers too. They only move members around or call
//   other operators, so they are correct on any device, and they must run on
//   the ember tensors themselves: indices() and values() return the members,
//   not copies, and a constructor keeps ember members.
// - arithmetic: the CPU's sparse kernels (SparseCPU alone has them: CUDA has
//   its own), run on host views of the members (EmberSparseHost.h).
// An operator in neither list has no Sparseember kernel, as sigmoid has no
// SparseCPU one: calling it raises the dispatcher's NotImplementedError.
#include "sparse/EmberSparseGuard.h"
#include "sparse/EmberSparseHost.h"

// ember-book: begin sparse_coo_structure
#include <ATen/core/Tensor.h>
#include <ATen/ops/_coalesced_native.h>
#include <ATen/ops/_dimI_native.h>
#include <ATen/ops/_dimV_native.h>
#include <ATen/ops/_indices_native.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors_native.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_to_sparse_native.h>
#include <ATen/ops/_values_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/copy_sparse_to_sparse_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/indices_native.h>
#include <ATen/ops/is_coalesced_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/sparse_resize_and_clear_native.h>
#include <ATen/ops/sparse_resize_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/ops/zeros_native.h>
#include <torch/library.h>

namespace {
// The two overloads of the _to_sparse kernels: (self, sparse_dim) and
// (self, layout, blocksize, dense_dim).
using ToSparseDim = at::Tensor(const at::Tensor&, int64_t);
using ToSparse = at::Tensor(const at::Tensor&, std::optional<at::Layout>,
                            at::OptionalIntArrayRef, std::optional<int64_t>);
} // namespace

// Structure: PyTorch's device-generic kernels. Those that allocate run on
// their arguments' device (EmberSparseGuard.h); the accessors need no guard.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  // Constructors: a SparseTensorImpl with the Sparseember key (from the
  // device), whose members must be on that same device (checked by the impl).
  m.impl("_sparse_coo_tensor_with_dims",
         EMBER_SPARSE_GUARDED(at::native::new_with_dims_sparse));
  m.impl("_sparse_coo_tensor_with_dims_and_tensors",
         EMBER_SPARSE_GUARDED(
             at::native::new_with_dims_and_tensor_sparse_symint));
  m.impl("empty.memory_format", EMBER_SPARSE_GUARDED(at::native::empty_sparse));
  m.impl("empty_like", EMBER_SPARSE_GUARDED(at::native::empty_like_sparse_coo));
  m.impl("zeros.out", EMBER_SPARSE_GUARDED(at::native::zeros_sparse_out));
  m.impl("sparse_resize_", EMBER_SPARSE_GUARDED(at::native::sparse_resize_));
  m.impl("sparse_resize_and_clear_",
         EMBER_SPARSE_GUARDED(at::native::sparse_resize_and_clear_));
  m.impl("resize_as_sparse_",
         EMBER_SPARSE_GUARDED(at::native::resize_as_sparse_));
  m.impl("zero_", EMBER_SPARSE_GUARDED(at::native::zero_sparse_));
  // Members and flags: the members themselves, so that writing through
  // x._values() changes x, as on the CPU.
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_dimI", TORCH_FN(at::native::sparse_dim_sparse));
  m.impl("_dimV", TORCH_FN(at::native::dense_dim_sparse));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse));
  m.impl("is_coalesced", TORCH_FN(at::native::is_coalesced_sparse));
  m.impl("_coalesced_", TORCH_FN(at::native::_coalesced_sparse_));
  m.impl("_indices", TORCH_FN(at::native::_indices_sparse));
  m.impl("_values", TORCH_FN(at::native::_values_sparse));
  m.impl("indices", TORCH_FN(at::native::indices_sparse));
  m.impl("values", TORCH_FN(at::native::values_sparse));
  // Copies: the members copied with copy_/to, between ember and the CPU too
  // (x.cpu() and x.to("ember") of a sparse tensor end here).
  m.impl("copy_", EMBER_SPARSE_GUARDED(at::native::copy_sparse_wrapper_));
  m.impl("copy_sparse_to_sparse_",
         EMBER_SPARSE_GUARDED(at::native::copy_sparse_));
  m.impl("clone", EMBER_SPARSE_GUARDED(at::native::clone_sparse));
  // to_dense: zeros, then add_ of the sparse tensor (a host kernel below).
  m.impl("_to_dense", EMBER_SPARSE_GUARDED(at::native::sparse_to_dense));
  // to_sparse() of a COO tensor: itself, or its members reshaped.
  m.impl("_to_sparse.sparse_dim",
         EMBER_SPARSE_ON_DEVICE(ToSparseDim, at::native::sparse_coo_to_sparse));
  m.impl("_to_sparse",
         EMBER_SPARSE_ON_DEVICE(ToSparse, at::native::sparse_coo_to_sparse));
}
// ember-book: end sparse_coo_structure

// ember-book: begin sparse_coo_to_sparse
// A dense ember tensor's to_sparse(): nonzero, index and the constructor, on
// ember (CPU and CUDA share this kernel). Without it the call would fall back
// to the CPU and copy the whole dense tensor there and back.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse.sparse_dim",
         EMBER_SPARSE_ON_DEVICE(ToSparseDim, at::native::dense_to_sparse));
  m.impl("_to_sparse",
         EMBER_SPARSE_ON_DEVICE(ToSparse, at::native::dense_to_sparse));
}
// ember-book: end sparse_coo_to_sparse

// ember-book: begin sparse_coo_arithmetic
// Arithmetic: the CPU's kernels on host views. Every name here has a
// SparseCPU kernel; the sparse host kernel redispatches to it.
TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  using ember::sparse::hostKernel;
  for (const char* name : {
           // coalesce(): sorts the indices and sums duplicates.
           "_coalesce",
           // Binary: sparse with sparse, sparse with a scalar, and dense
           // with sparse (dense.add_(sparse), what optimizers do).
           "add.Tensor", "add_.Tensor", "add.out", "sub.Tensor", "sub_.Tensor",
           "sub.out", "mul.Tensor", "mul_.Tensor", "mul.out", "div.Tensor",
           "div_.Tensor", "div.out", "div.Tensor_mode", "div_.Tensor_mode",
           "div.out_mode", "pow.Tensor_Scalar", "pow.Tensor_Scalar_out",
           // Masks: dense.sparse_mask(sparse), the values at sparse's indices.
           "sparse_mask", "_sparse_mask_projection",
           // Reductions and softmax, with their backward kernels.
           "sum", "sum.dim_IntList", "_sparse_sum_backward", "_sparse_softmax",
           "_sparse_softmax_backward_data", "_sparse_log_softmax",
           "_sparse_log_softmax_backward_data",
           // Indexing and conversions to the compressed layouts.
           "index_select", "_to_sparse_csr", "_to_sparse_csc",
           // Elementwise functions whose zero stays zero.
           "neg", "neg_", "neg.out", "abs", "abs_", "abs.out", "sqrt", "sqrt_",
           "sqrt.out", "sin", "sin_", "sin.out", "tanh", "tanh_", "tanh.out",
           "relu", "relu_", "sign", "sign_", "sign.out", "expm1", "expm1_",
           "expm1.out", "log1p", "log1p_", "log1p.out", "isnan", "isinf"}) {
    m.impl(name, hostKernel());
  }
}
// ember-book: end sparse_coo_arithmetic
