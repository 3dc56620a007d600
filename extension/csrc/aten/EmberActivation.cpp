// Activations and their gradients: relu's (the stub_kernels chapter), and
// GELU's, which the profiler chapter adds after the profiler shows the CPU
// fallback's copies around every aten::gelu of a training step.
#include <ATen/core/Tensor.h>
#include <ATen/native/Activation.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <torch/library.h>

#include <cmath>
#include <string_view>

#include "aten/EmberHostKernels.h"
#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"

// ember-book: begin relu_ops
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// relu(x) is clamp_min(x, 0) in ATen; the stub gets the bound as a Scalar.
void clampMinKernel(at::TensorIteratorBase& iter, at::Scalar min) {
  dispatchNumbers("aten::clamp_min.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T bound = min.to<T>();
    // NaN < bound is false, so NaN stays NaN, as on the CPU.
    unaryLoop<T, T>("aten::clamp_min.out", iter,
                    [bound](T x) EMBER_INLINE { return x < bound ? bound : x; });
  });
}

// relu's gradient: threshold_backward(grad, x, 0) is grad where x > 0, else 0.
// The stub computes out = x <= threshold ? value : other.
void thresholdKernel(at::TensorIteratorBase& iter, const at::Scalar& threshold,
                     const at::Scalar& value) {
  dispatchNumbers("aten::threshold_backward", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T t = threshold.to<T>(), v = value.to<T>();
    binaryLoop<T, T>("aten::threshold_backward", iter,
                     [t, v](T x, T other) EMBER_INLINE { return x <= t ? v : other; });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(clamp_min_scalar_stub, &ember::clampMinKernel);
EMBER_REGISTER_STUB(threshold_stub, &ember::thresholdKernel);

namespace ember {

// Chapter 14's host kernel (EmberHostKernel.cpp) computes the dtypes the
// loops lack (float16 and bfloat16 under autocast, ...) with the CPU's
// kernels on the device's memory; meta() checks the arguments and sizes
// the out= tensor first.
at::Tensor& clamp_min_out(const at::Tensor& self, const at::Scalar& min,
                          at::Tensor& out) {
  using Native = at::native::structured_clamp_min_out;
  if (loopsCompute({out, self})) {
    return structuredOut<Native>(out, self, min);
  }
  StructuredOut<Native>(out).meta(self, min);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::clamp_min_out>::call(
      self, min, out);
}

at::Tensor& threshold_backward_out(const at::Tensor& grad,
                                   const at::Tensor& self,
                                   const at::Scalar& threshold,
                                   at::Tensor& grad_input) {
  using Native = at::native::structured_threshold_backward_out;
  if (loopsCompute({grad_input, grad, self})) {
    return structuredOut<Native>(grad_input, grad, self, threshold);
  }
  StructuredOut<Native>(grad_input).meta(grad, self, threshold);
  return at::native::call_fallback_fn<
      &hostKernel, at::_ops::threshold_backward_grad_input>::call(grad, self,
                                                                  threshold,
                                                                  grad_input);
}

// relu and relu_ have CPU and CUDA kernels only: ATen's relu (clamp_min with
// 0) is device-generic, so ember registers it as its own.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clamp_min.out", &clamp_min_out);
  m.impl("threshold_backward.grad_input", &threshold_backward_out);
  m.impl("relu", &at::native::relu);
  m.impl("relu_", &at::native::relu_);
}

} // namespace ember
// ember-book: end relu_ops

// ember-book: begin gelu
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// GELU's CPU and CUDA kernels are device-specific (gelu_out_cpu calls its
// stub for kCPU), so there is no stub to register: ember brings the loops.
// x * Phi(x) exactly, or the tanh approximation, in the input's float type.
void geluKernel(at::TensorIteratorBase& iter, bool tanh) {
  dispatchFloating("aten::gelu.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    unaryLoop<T, T>("aten::gelu.out", iter, [tanh](T x) EMBER_INLINE {
      if (tanh) {
        const T inner = T(M_2_SQRTPI * M_SQRT1_2) * (x + T(0.044715) * x * x * x);
        return T(0.5) * x * (T(1) + std::tanh(inner));
      }
      return T(0.5) * x * (T(1) + std::erf(x * T(M_SQRT1_2)));
    });
  });
}

// d/dx GELU, times the incoming gradient: Phi(x) + x * phi(x) (exact), or
// the derivative of the tanh form.
void geluBackwardKernel(at::TensorIteratorBase& iter, bool tanh) {
  dispatchFloating("aten::gelu_backward", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>("aten::gelu_backward", iter, [tanh](T g, T x) EMBER_INLINE {
      if (tanh) {
        const T k = T(M_2_SQRTPI * M_SQRT1_2);
        const T t = std::tanh(k * (x + T(0.044715) * x * x * x));
        const T dinner = k * (T(1) + T(3 * 0.044715) * x * x);
        return g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner);
      }
      const T cdf = T(0.5) * (T(1) + std::erf(x * T(M_SQRT1_2)));
      const T pdf = T(M_2_SQRTPI * M_SQRT1_2 * 0.5) * std::exp(T(-0.5) * x * x);
      return g * (cdf + x * pdf);
    });
  });
}

} // namespace ember
#pragma GCC pop_options

namespace ember {

bool isTanh(std::string_view approximate) {
  return at::native::get_gelutype_enum(approximate) == at::native::GeluType::Tanh;
}

// ATen's meta classes check the arguments and build the iterator over the
// out= tensor; dtypes the loops lack go to chapter 14's host kernel.
at::Tensor& gelu_out(const at::Tensor& self, std::string_view approximate,
                     at::Tensor& out) {
  StructuredOut<at::meta::structured_gelu> iter(out);
  iter.meta(self, approximate);
  if (!loopsCompute({out, self})) {
    return at::native::call_fallback_fn<&hostKernel, at::_ops::gelu_out>::call(
        self, approximate, out);
  }
  geluKernel(iter, isTanh(approximate));
  return out;
}

at::Tensor& gelu_backward_out(const at::Tensor& grad, const at::Tensor& self,
                              std::string_view approximate,
                              at::Tensor& grad_input) {
  StructuredOut<at::meta::structured_gelu_backward> iter(grad_input);
  iter.meta(grad, self, approximate);
  if (!loopsCompute({grad_input, grad, self})) {
    return at::native::call_fallback_fn<
        &hostKernel, at::_ops::gelu_backward_grad_input>::call(grad, self,
                                                               approximate,
                                                               grad_input);
  }
  geluBackwardKernel(iter, isTanh(approximate));
  return grad_input;
}

// The out= overloads; gelu, gelu_ and gelu_backward reach them through
// their default kernels at PrivateUse1.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("gelu.out", &gelu_out);
  m.impl("gelu_backward.grad_input", &gelu_backward_out);
}

} // namespace ember
// ember-book: end gelu
