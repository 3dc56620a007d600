// Earlier versions of parts that chapter 06 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

// ember-book: begin autograd_custom_abs.v1
// No derivative yet: a clear error if backward reaches custom_abs, for
// every backend (the Autograd alias key fills AutogradPrivateUse1 and
// AutogradCPU alike).
TORCH_LIBRARY_IMPL(ember, Autograd, m) {
  m.impl("custom_abs", torch::autograd::autogradNotImplementedFallback());
}
// ember-book: end autograd_custom_abs.v1

// ember-book: begin autograd_custom_abs_inplace.v1
// An in-place twin of custom_abs, to show what autograd needs from a
// mutating operator. One kernel serves every backend: registered at
// CompositeExplicitAutograd, it fills CPU and PrivateUse1 (not Autograd).
namespace ember {

at::Tensor& customAbsInplace(at::Tensor& self) {
  // A backend kernel computes below the autograd and ADInplaceOrView keys:
  // reusing aten's abs_ here must not record or bump anything itself.
  at::AutoDispatchBelowADInplaceOrView guard;
  return self.abs_();
}

} // namespace ember

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("custom_abs_(Tensor(a!) self) -> Tensor(a!)");
}

TORCH_LIBRARY_IMPL(ember, CompositeExplicitAutograd, m) {
  m.impl("custom_abs_", &ember::customAbsInplace);
}

// No derivative: refuse backward through it with a clear error.
TORCH_LIBRARY_IMPL(ember, Autograd, m) {
  m.impl("custom_abs_", torch::autograd::autogradNotImplementedFallback());
}
// ember-book: end autograd_custom_abs_inplace.v1

// ember-book: begin autograd_custom_abs.v2
namespace ember {

// Chapter 05's cached handle to ember::custom_abs. It is defined in chapter
// 05's translation unit, so this one needs the declaration.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)>& customAbsOp();

// custom_abs's derivative: d|x|/dx = sgn(x) (0 at 0, as for aten::abs).
struct CustomAbsFunction
    : public torch::autograd::Function<CustomAbsFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& self) {
    ctx->save_for_backward({self});
    return customAbsOp().call(self);
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    const at::Tensor self = ctx->get_saved_variables()[0];
    return {grad_outputs[0].mul(self.sgn())};
  }
};

at::Tensor customAbsAutograd(const at::Tensor& self) {
  return CustomAbsFunction::apply(self);
}

} // namespace ember

// The same autograd kernel for both backends custom_abs has kernels for.
TORCH_LIBRARY_IMPL(ember, AutogradPrivateUse1, m) {
  m.impl("custom_abs", &ember::customAbsAutograd);
}

TORCH_LIBRARY_IMPL(ember, AutogradCPU, m) {
  m.impl("custom_abs", &ember::customAbsAutograd);
}
// ember-book: end autograd_custom_abs.v2
