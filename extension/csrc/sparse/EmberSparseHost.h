// The sparse host kernel: an operator on sparse ember tensors computed by the
// CPU's sparse kernel (SparseCPU, SparseCsrCPU) on host views of the members'
// memory, inside one launch. The COO, CSR and product files register it for
// the operators whose kernels are the CPU's alone in PyTorch.
#pragma once

// ember-book: begin sparse_host_api
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <vector>

namespace ember::sparse {

// The tensors that hold a tensor's data: itself (strided), indices and
// values (COO), compressed indices, plain indices and values (CSR, CSC, BSR,
// BSC). An ember kernel lists them all in its launch.
std::vector<at::Tensor> members(const at::Tensor& t);

// The boxed kernel. Sparse ember arguments become CPU sparse tensors over
// host views of their members, dense ones host views; the CPU's kernel runs
// on them; new results (sparse or dense) are copied to the device after the
// launch, and a sparse argument the operator writes (out=, in-place) takes
// the members the CPU's kernel gave it.
void sparseHostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

inline torch::CppFunction hostKernel() {
  return torch::CppFunction::makeFromBoxedFunction<&sparseHostKernel>();
}

} // namespace ember::sparse
// ember-book: end sparse_host_api
