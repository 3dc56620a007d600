// Exercise solutions of the autograd chapter (shown by its %%cpp exercise_* cells).
// Not part of the torch_ember package: the chapter's builds compile them,
// after the chapter's own parts (they use the custom_ops chapter's customAbsOp).
#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

// ember-book: begin exercise_view_op
namespace ember_exercise {

// A view: the result shares self's memory (Tensor(a) in and out).
at::Tensor customAlias(const at::Tensor& self) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return self.alias();
}

} // namespace ember_exercise

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("custom_alias(Tensor(a) self) -> Tensor(a)");
}

TORCH_LIBRARY_IMPL(ember, CompositeExplicitAutograd, m) {
  m.impl("custom_alias", &ember_exercise::customAlias);
}

TORCH_LIBRARY_IMPL(ember, Autograd, m) {
  m.impl("custom_alias", torch::autograd::autogradNotImplementedFallback());
}

TORCH_LIBRARY_IMPL(ember, ADInplaceOrView, m) {
  m.impl("custom_alias",
         torch::autograd::autogradNotImplementedInplaceOrViewFallback());
}
// ember-book: end exercise_view_op

// ember-book: begin exercise_inplace_derivative
namespace ember_exercise {

// |x| in place. The derivative needs sgn(x) of the input, which the
// operator overwrites: compute it first. mark_dirty tells autograd that
// the output is the input, modified.
struct CustomAbsInplaceFunction
    : public torch::autograd::Function<CustomAbsInplaceFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
                            at::Tensor self) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({self.sgn()});
    static const auto op =
        c10::Dispatcher::singleton()
            .findSchemaOrThrow("ember::custom_abs_", "")
            .typed<at::Tensor&(at::Tensor&)>();
    op.call(self);
    ctx->mark_dirty({self});
    return self;
  }

  static torch::autograd::variable_list backward(
      torch::autograd::AutogradContext* ctx,
      torch::autograd::variable_list grad_outputs) {
    return {grad_outputs[0].mul(ctx->get_saved_variables()[0])};
  }
};

at::Tensor& customAbsInplaceAutograd(at::Tensor& self) {
  CustomAbsInplaceFunction::apply(self);
  return self;
}

} // namespace ember_exercise

// The backend keys win over the chapter's kernel at the Autograd alias.
TORCH_LIBRARY_IMPL(ember, AutogradPrivateUse1, m) {
  m.impl("custom_abs_", &ember_exercise::customAbsInplaceAutograd);
}

TORCH_LIBRARY_IMPL(ember, AutogradCPU, m) {
  m.impl("custom_abs_", &ember_exercise::customAbsInplaceAutograd);
}
// ember-book: end exercise_inplace_derivative
