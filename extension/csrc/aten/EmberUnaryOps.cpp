// Unary elementwise operators: ATen's out= implementations run, their stubs
// land on ember's loops.
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/log_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cmath>

#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"
#include "aten/EmberHostKernels.h"

// ember-book: begin abs_stub
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// abs_stub's kernel: ATen has built the TensorIterator (output resized, dtypes
// checked); ember runs the loop. Any layout: the loop walks byte strides.
void absKernel(at::TensorIteratorBase& iter) {
  dispatchNumbers("aten::abs.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    unaryLoop<T, T>("aten::abs.out", iter,
                    [](T v) EMBER_INLINE { return std::abs(v); });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(abs_stub, &ember::absKernel);
// ember-book: end abs_stub

// ember-book: begin abs_out
namespace ember {

// abs.out has kernels for CPU and CUDA only; ATen's implementation of it is
// device-generic and calls abs_stub(iter.device_type(), iter).
// Other dtypes than the loops' (float16, bfloat16, complex: |z| is a real)
// go to chapter 14's host kernel (EmberHostKernel.cpp), which computes with
// the CPU's kernel on the device's memory; out is sized first.
at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  if (loopsCompute({out, self})) {
    return at::native::abs_out(self, out);
  }
  at::native::resize_output(out, self.sizes());
  return at::native::call_fallback_fn<&hostKernel, at::_ops::abs_out>::call(
      self, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("abs.out", &abs_out);
}

} // namespace ember
// ember-book: end abs_out

// ember-book: begin unary_ops
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// Float ops: ATen promotes integer inputs to the default float dtype.
#define EMBER_FLOAT_UNARY(name, expression)                                 \
  void name##Kernel(at::TensorIteratorBase& iter) {                         \
    dispatchFloating("aten::" #name ".out", iter.common_dtype(),            \
                     [&](auto zero) {                                       \
      using T = decltype(zero);                                             \
      unaryLoop<T, T>("aten::" #name ".out", iter,                          \
                      [](T x) EMBER_INLINE { return T(expression); });      \
    });                                                                     \
  }

EMBER_FLOAT_UNARY(exp, std::exp(x))
EMBER_FLOAT_UNARY(log, std::log(x))
EMBER_FLOAT_UNARY(sqrt, std::sqrt(x))
EMBER_FLOAT_UNARY(rsqrt, T(1) / std::sqrt(x))
EMBER_FLOAT_UNARY(sin, std::sin(x))
EMBER_FLOAT_UNARY(cos, std::cos(x))
EMBER_FLOAT_UNARY(tanh, std::tanh(x))
EMBER_FLOAT_UNARY(sigmoid, T(1) / (T(1) + std::exp(-x)))
#undef EMBER_FLOAT_UNARY

void negKernel(at::TensorIteratorBase& iter) {
  dispatchNumbers("aten::neg.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    unaryLoop<T, T>("aten::neg.out", iter, [](T x) EMBER_INLINE { return T(-x); });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(exp_stub, &ember::expKernel);
EMBER_REGISTER_STUB(log_stub, &ember::logKernel);
EMBER_REGISTER_STUB(sqrt_stub, &ember::sqrtKernel);
EMBER_REGISTER_STUB(rsqrt_stub, &ember::rsqrtKernel);
EMBER_REGISTER_STUB(sin_stub, &ember::sinKernel);
EMBER_REGISTER_STUB(cos_stub, &ember::cosKernel);
EMBER_REGISTER_STUB(tanh_stub, &ember::tanhKernel);
EMBER_REGISTER_STUB(sigmoid_stub, &ember::sigmoidKernel);
EMBER_REGISTER_STUB(neg_stub, &ember::negKernel);

namespace ember {

// Chapter 14's host kernel (EmberHostKernel.cpp) computes the dtypes the
// loops lack (float16, bfloat16, complex, int32, ...) with the CPU's kernels
// on the device's memory; meta() checks the arguments and sizes out first.
// These operators are structured: ATen's class for the op runs meta() and
// impl(); structuredOut supplies the out= tensor (see structured_out).
#define EMBER_UNARY_OUT(name)                                               \
  at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {         \
    using Native = at::native::structured_##name##_out;                     \
    if (loopsCompute({out, self})) {                                        \
      return structuredOut<Native>(out, self);                              \
    }                                                                       \
    StructuredOut<Native>(out).meta(self);                                  \
    return at::native::call_fallback_fn<                                     \
        &hostKernel, at::_ops::name##_out>::call(self, out);                 \
  }
EMBER_UNARY_OUT(exp)
EMBER_UNARY_OUT(log)
EMBER_UNARY_OUT(sqrt)
EMBER_UNARY_OUT(rsqrt)
EMBER_UNARY_OUT(sin)
EMBER_UNARY_OUT(cos)
EMBER_UNARY_OUT(tanh)
EMBER_UNARY_OUT(sigmoid)
EMBER_UNARY_OUT(neg)
#undef EMBER_UNARY_OUT

// Only the out= overloads: the functional (exp) and in-place (exp_) forms
// already have a default kernel at PrivateUse1 that calls exp.out.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("exp.out", &exp_out);
  m.impl("log.out", &log_out);
  m.impl("sqrt.out", &sqrt_out);
  m.impl("rsqrt.out", &rsqrt_out);
  m.impl("sin.out", &sin_out);
  m.impl("cos.out", &cos_out);
  m.impl("tanh.out", &tanh_out);
  m.impl("sigmoid.out", &sigmoid_out);
  m.impl("neg.out", &neg_out);
}

} // namespace ember
// ember-book: end unary_ops
