// Exercise solutions of the custom_ops chapter (shown by its %%cpp exercise_* cells).
// Not part of the torch_ember package: the chapter's builds compile them,
// after the chapter's own parts (they use its ember::customAbsCpu).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

// ember-book: begin exercise_custom_abs_out
namespace ember_exercise {

// The out= variant: compute, then resize `out` and write into it. The result
// is `out` itself, as the schema's (a!) on the return type promises.
at::Tensor& customAbsOutCpu(const at::Tensor& self, at::Tensor& out) {
  const at::Tensor result = ember::customAbsCpu(self);
  out.resize_(result.sizes());
  out.copy_(result);
  return out;
}

} // namespace ember_exercise

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("custom_abs.out(Tensor self, *, Tensor(a!) out) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(ember, CPU, m) {
  m.impl("custom_abs.out", TORCH_FN(ember_exercise::customAbsOutCpu));
}
// ember-book: end exercise_custom_abs_out
