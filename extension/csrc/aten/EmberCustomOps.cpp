// ember's own operators: the `ember` namespace (the custom_ops chapter).
//
// ember::custom_abs is an operator ATen does not have, defined by this
// library: its schema, a CPU kernel, an ember kernel (a launch on the device)
// and a Meta kernel (shapes only, for FakeTensorMode and torch.compile).
// ember::custom_l1_loss is a composite that calls it through the dispatcher.
// The Python custom operators live in torch_ember/custom_ops.py.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/empty.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <cmath>
#include <cstddef>

#include "aten/EmberCustomOps.h"
#include "aten/EmberLaunch.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin custom_abs
namespace ember {

// |x| over n contiguous elements. The CPU kernel runs it on host pointers,
// the ember kernel inside a launch on the device's pointers.
template <typename scalar_t>
void absLoop(const scalar_t* in, scalar_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::abs(in[i]);
  }
}

// The checks both kernels make, before any work: a clear error names the
// operator, the device and what was wrong.
void checkCustomAbs(const at::Tensor& self) {
  TORCH_CHECK(self.scalar_type() == at::kFloat || self.scalar_type() == at::kDouble,
              "ember::custom_abs: expected a float32 or float64 tensor, got ",
              self.scalar_type(), " on ", self.device());
}

at::Tensor customAbsCpu(const at::Tensor& self) {
  checkCustomAbs(self);
  const at::Tensor input = self.contiguous();
  at::Tensor out = at::empty(input.sizes(), input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "custom_abs_cpu", [&] {
    absLoop(input.const_data_ptr<scalar_t>(), out.mutable_data_ptr<scalar_t>(),
            input.numel());
  });
  return out;
}

at::Tensor customAbsEmber(const at::Tensor& self) {
  checkCustomAbs(self);
  if (!self.is_contiguous()) {
    // The loop wants contiguous memory: copy the input (an aten call, from
    // the top) and run this kernel again on the copy. redispatch enters at
    // the keys we pass, PrivateUse1 alone: autograd, tracing and Python
    // modes above us have seen this call once, call() would show them twice.
    return customAbsOp().redispatch(
        c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), self.contiguous());
  }
  at::Tensor out = at::empty(self.sizes(), self.options());
  if (self.numel() == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES(self.scalar_type(), "custom_abs_ember", [&] {
    const scalar_t* in = self.const_data_ptr<scalar_t>();
    scalar_t* result = out.mutable_data_ptr<scalar_t>();
    const int64_t n = self.numel();
    // The loop runs on the device, through chapter 04's launch: every buffer
    // it touches is named (the driver maps exactly those), and it reaches
    // them at address + offset. An error inside comes out after the launch.
    launchRecorded({in, result}, [=](ptrdiff_t offset) {
      absLoop(atOffset(in, offset), atOffset(result, offset), n);
    });
  });
  return out;
}

} // namespace ember

// The `ember` namespace: one TORCH_LIBRARY per namespace in a process (more
// code adds to it with TORCH_LIBRARY_FRAGMENT). The schema is the contract:
// a new tensor, no aliasing, nothing mutated.
TORCH_LIBRARY(ember, m) {
  m.def("custom_abs(Tensor self) -> Tensor");
}

TORCH_LIBRARY_IMPL(ember, CPU, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsCpu));
}

TORCH_LIBRARY_IMPL(ember, PrivateUse1, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsEmber));
}
// ember-book: end custom_abs

// ember-book: begin custom_abs_meta
namespace ember {

// What custom_abs returns, without computing it: FakeTensorMode and
// torch.compile run this on tensors that have no data. Sizes may be symbolic
// (dynamic shapes), so they are read and passed as SymInts: sizes() throws
// on a symbolic tensor.
at::Tensor customAbsMeta(const at::Tensor& self) {
  checkCustomAbs(self);
  return at::empty_symint(self.sym_sizes(), self.options());
}

} // namespace ember

TORCH_LIBRARY_IMPL(ember, Meta, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsMeta));
}
// ember-book: end custom_abs_meta

// ember-book: begin custom_call
namespace ember {

// ember::custom_abs from C++. There is no at::custom_abs: the typed handle is
// what at::abs is made of for aten ops. Looking the schema up by name costs a
// hash lookup and a lock, so it is done once, on first use.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)>& customAbsOp() {
  static const auto handle =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("ember::custom_abs", "")
          .typed<at::Tensor(const at::Tensor&)>();
  return handle;
}

// mean(|self - target|), built from other operators: a composite
// (CompositeImplicitAutograd). call() dispatches from the top, so autograd,
// fake tensors and torch.compile see custom_abs as an operator of its own.
at::Tensor customL1Loss(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.device() == target.device(),
              "ember::custom_l1_loss: self is on ", self.device(),
              " and target on ", target.device(),
              "; both must be on the same device");
  return customAbsOp().call(self.sub(target)).mean();
}

} // namespace ember

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("custom_l1_loss(Tensor self, Tensor target) -> Tensor");
}

TORCH_LIBRARY_IMPL(ember, CompositeImplicitAutograd, m) {
  m.impl("custom_l1_loss", TORCH_FN(ember::customL1Loss));
}
// ember-book: end custom_call
