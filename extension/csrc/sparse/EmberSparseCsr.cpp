// Sparse CSR (and CSC, BSR, BSC) tensors on ember: the SparseCsrPrivateUse1
// row of the dispatch table, built as the COO row is (EmberSparseCoo.cpp):
// structure by PyTorch's device-generic kernels, on the ember members
// themselves; arithmetic by the CPU's kernels (SparseCsrCPU) on host views.
#include "sparse/EmberSparseGuard.h"
#include "sparse/EmberSparseHost.h"

// ember-book: begin sparse_csr
#include <ATen/core/Tensor.h>
#include <ATen/ops/_nnz_native.h>
#include <ATen/ops/_to_dense_native.h>
#include <ATen/ops/_to_sparse_csr_native.h>
#include <ATen/ops/ccol_indices_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/col_indices_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/crow_indices_native.h>
#include <ATen/ops/dense_dim_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/empty_native.h>
#include <ATen/ops/resize_as_sparse_native.h>
#include <ATen/ops/row_indices_native.h>
#include <ATen/ops/sparse_dim_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

// Structure: PyTorch's device-generic kernels (SparseCsrCUDA's too). The
// constructor needs none: _sparse_compressed_tensor_unsafe builds the
// SparseCsrTensorImpl for a PrivateUse1 device itself.
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("crow_indices", TORCH_FN(at::native::crow_indices_sparse_csr));
  m.impl("col_indices", TORCH_FN(at::native::col_indices_sparse_csr));
  m.impl("ccol_indices", TORCH_FN(at::native::ccol_indices_sparse_csr));
  m.impl("row_indices", TORCH_FN(at::native::row_indices_sparse_csr));
  m.impl("values", TORCH_FN(at::native::values_sparse_csr));
  m.impl("_nnz", TORCH_FN(at::native::_nnz_sparse_csr));
  m.impl("sparse_dim", TORCH_FN(at::native::sparse_dim_sparse_csr));
  m.impl("dense_dim", TORCH_FN(at::native::dense_dim_sparse_csr));
  m.impl("empty.memory_format",
         EMBER_SPARSE_GUARDED(at::native::empty_sparse_compressed));
  m.impl("empty_like", EMBER_SPARSE_GUARDED(at::native::empty_like_sparse_csr));
  m.impl("resize_as_sparse_",
         EMBER_SPARSE_GUARDED(at::native::resize_as_sparse_compressed_));
  m.impl("zero_", EMBER_SPARSE_GUARDED(at::native::zero_sparse_csr_));
  m.impl("copy_", EMBER_SPARSE_GUARDED(at::native::copy_sparse_compressed_));
  m.impl("clone", EMBER_SPARSE_GUARDED(at::native::clone_sparse_compressed));
  // to_dense: zeros, then the values added at their (batch, row, column)
  // with dense ember operators.
  m.impl("_to_dense",
         EMBER_SPARSE_GUARDED(at::native::sparse_compressed_to_dense));
}

// Arithmetic and conversions: the CPU's kernels on host views.
TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  using ember::sparse::hostKernel;
  for (const char* name : {
           // CSR @ dense, torch.sparse.mm(csr, dense, reduce) and its backward,
           // torch.sparse.sampled_addmm.
           "mm", "mm.out", "addmm", "addmm.out", "_sparse_mm_reduce_impl",
           "_sparse_mm_reduce_impl_backward", "sparse_sampled_addmm",
           "sparse_sampled_addmm.out",
           // dense.sparse_mask(csr): sampled_addmm's backward.
           "sparse_mask",
           // Conversions between the layouts, and reductions.
           "_to_sparse.sparse_dim", "_to_sparse", "_to_sparse_csr",
           "_to_sparse_csc", "sum", "sum.dim_IntList",
           "_sparse_csr_sum.dim_dtype",
           // Elementwise.
           "add.Tensor", "add.out", "mul.Tensor", "mul.out", "neg", "neg.out",
           "abs", "abs.out"}) {
    m.impl(name, hostKernel());
  }
}

// A dense ember tensor's to_sparse_csr(): PyTorch's device-generic kernel
// (CPU's and CUDA's), on ember.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_to_sparse_csr",
         EMBER_SPARSE_GUARDED(at::native::dense_to_sparse_csr));
}
// ember-book: end sparse_csr
