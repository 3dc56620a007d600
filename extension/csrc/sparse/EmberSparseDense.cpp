// Two dense operators that sparse training runs every step, given ember
// kernels here: without one they reached the CPU fallback, and sparse
// embeddings are where that costs most.
// - index_select: nn.Embedding's forward (and EmbeddingBag's). The fallback
//   copied the whole table to the CPU to read a batch of its rows: 25 MiB
//   for a 100000 x 64 float32 table, every step.
// - pow.Tensor_Scalar_out: x.pow(2) (SparseAdam, Adagrad square the values
//   of the gradient).
// Both are the CPU's kernels on host views of ember's memory (the boxed host
// kernel of aten/EmberHostKernels.h), writing into an ember result in place.
#include "aten/EmberHostKernels.h"

// ember-book: begin sparse_dense_ops
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/SmallVector.h>
#include <torch/library.h>

namespace ember {
namespace {

// index_select's result allocated on ember at its final size (self's, with
// index.numel() rows along dim), then index_select.out (the CPU's kernel, on
// host views): the CPU's functional kernel would return a host tensor, to be
// copied to the device after the launch. The CPU's kernel checks the
// arguments (a 2-D index, ...) and raises in its own words; a dim out of
// range is refused here, by the same check.
at::Tensor index_select(const at::Tensor& self, int64_t dim,
                        const at::Tensor& index) {
  const c10::OptionalDeviceGuard guard(self.device());
  c10::SmallVector<int64_t, 6> size(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) {
    size[c10::maybe_wrap_dim(dim, self.dim())] = index.numel();
  }
  at::Tensor out = at::empty(size, self.options());
  return at::index_select_out(out, self, dim, index);
}

} // namespace
} // namespace ember

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select", TORCH_FN(ember::index_select));
  m.impl("index_select.out",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
  m.impl("pow.Tensor_Scalar_out",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
}
// ember-book: end sparse_dense_ops
