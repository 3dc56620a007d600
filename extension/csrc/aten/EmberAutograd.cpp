// Autograd for ember: what the Autograd keys hold for operators that ATen's
// derivative formulas do not cover.
//
// Most of a backend needs nothing here: every aten operator with a derivative
// formula has a kernel at the Autograd alias key, which fills
// AutogradPrivateUse1, and that kernel records the graph and redispatches to
// ember's kernels. This file covers ember's own operators (the `ember`
// namespace, the custom_ops chapter) and, for one aten operator, the backward operator
// its derivative formula calls (the autograd chapter replaced tanh's whole autograd
// kernel instead; the contracts chapter shows why that breaks torch.func).
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/sgn.h>
#include <ATen/ops/tanh.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "aten/EmberCustomOps.h"

// ember-book: begin autograd_custom_abs_inplace
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

// No derivative: refuse backward through it with a clear error (Autograd),
// and bump the version counter of the tensor it writes (ADInplaceOrView), so
// that autograd notices a saved tensor was overwritten.
TORCH_LIBRARY_IMPL(ember, Autograd, m) {
  m.impl("custom_abs_", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(ember, ADInplaceOrView, m) {
  m.impl("custom_abs_",
         torch::autograd::autogradNotImplementedInplaceOrViewFallback());
}
// ember-book: end autograd_custom_abs_inplace

// ember-book: begin autograd_custom_abs
namespace ember {

// custom_abs's derivative: d|x|/dx = sgn(x) (0 at 0, as for aten::abs).
struct CustomAbsFunction
    : public torch::autograd::Function<CustomAbsFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            const at::Tensor& self) {
    ctx->save_for_backward({self});
    // call() dispatches from the top of the key set. Below the autograd keys
    // it reaches the backend kernel (PrivateUse1 or CPU); without the guard
    // it would reach this autograd kernel again.
    at::AutoDispatchBelowADInplaceOrView guard;
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
// ember-book: end autograd_custom_abs

// ember-book: begin autograd_tanh
namespace ember {

// tanh's backward operator on ember: grad * (1 - y^2) from the result y,
// computed with elementwise operators ember has (mul, neg, add) instead of
// the CPU fallback. ATen's autograd kernel for tanh stays, and its formula
// (derivatives.yaml) calls tanh_backward, which reaches this kernel. That
// formula is what torch.func builds on: forward-mode AD uses its tangent
// formula, vmap the batching rule of tanh_backward, a second derivative the
// formula of tanh_backward itself. A C++ autograd::Function at
// AutogradPrivateUse1 hid all three behind one opaque node, which functorch
// refuses ("cannot use C++ torch::autograd::Function with functorch
// transforms").
at::Tensor tanhBackward(const at::Tensor& grad_output,
                        const at::Tensor& output) {
  // Conjugated, as ATen's kernel does for complex tensors (real: a no-op).
  return grad_output.mul(output.mul(output).neg_().add_(1).conj());
}

} // namespace ember

// A backend kernel, below autograd: every transform sees ATen's formulas.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("tanh_backward", &ember::tanhBackward);
}
// ember-book: end autograd_tanh
