// Two dense operators that sparse training runs every step, given ember
// kernels here: without one they reached the CPU fallback, and sparse
// embeddings are where that costs most.
// - index_select: nn.Embedding's forward (and EmbeddingBag's). The fallback
//   copied the whole table to the CPU to read a batch of its rows: 25 MiB
//   for a 100000 x 64 float32 table, every step.
// - pow.Tensor_Scalar_out: x.pow(2) (SparseAdam, Adagrad square the values
//   of the gradient).
// Both are the CPU's kernels on host views of ember's memory (the boxed host
// kernel of aten/EmberHostKernels.h): the inputs are read in place, and the
// structured pow writes into its ember result in place.
#include <torch/library.h>

#include "aten/EmberHostKernels.h"

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index_select",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
  m.impl("pow.Tensor_Scalar_out",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
}
