// Earlier versions of parts that chapter 03 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

// ember-book: begin cpu_fallback.v1
namespace ember {

// A boxed kernel: the dispatcher hands over the operator and a stack whose
// last entries are its arguments; the results must replace them.
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // ATen's generic fallback: copy the tensor arguments to the CPU, run the
  // CPU kernel, copy mutated arguments back into the ember tensors, and move
  // the results to the device of the first tensor argument.
  at::native::cpu_fallback(op, stack);
}

} // namespace ember

// `_`: all operators of all namespaces. One fallback per dispatch key: the
// dispatcher uses it for every operator with nothing registered at PrivateUse1.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
}
// ember-book: end cpu_fallback.v1
