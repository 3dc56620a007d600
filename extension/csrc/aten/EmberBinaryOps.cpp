// Binary elementwise operators: arithmetic with alpha, comparisons, maximum
// and minimum.
#include <ATen/core/Tensor.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/eq_native.h>
#include <ATen/ops/ge_native.h>
#include <ATen/ops/gt_native.h>
#include <ATen/ops/le_native.h>
#include <ATen/ops/lt_native.h>
#include <ATen/ops/maximum_native.h>
#include <ATen/ops/minimum_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/ne_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <type_traits>

#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"
#include "aten/EmberHostKernels.h"

// ember-book: begin binary_ops
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// add_stub computes self + alpha * other; sub reaches it too, with -alpha.
void addKernel(at::TensorIteratorBase& iter, const at::Scalar& alpha) {
  dispatchNumbersAndBool("aten::add.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T a = alpha.to<T>();
    if (a == T(1)) { // the common case, one multiplication less
      binaryLoop<T, T>("aten::add.out", iter,
                       [](T x, T y) EMBER_INLINE { return T(x + y); });
    } else {
      binaryLoop<T, T>("aten::add.out", iter,
                       [a](T x, T y) EMBER_INLINE { return T(x + a * y); });
    }
  });
}

void mulKernel(at::TensorIteratorBase& iter) {
  dispatchNumbersAndBool("aten::mul.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>("aten::mul.out", iter,
                     [](T x, T y) EMBER_INLINE { return T(x * y); });
  });
}

// True division: ATen promotes integer inputs to float before we see them.
void divKernel(at::TensorIteratorBase& iter) {
  dispatchFloating("aten::div.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>("aten::div.out", iter,
                     [](T x, T y) EMBER_INLINE { return T(x / y); });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(add_stub, &ember::addKernel);
EMBER_REGISTER_STUB(mul_stub, &ember::mulKernel);
EMBER_REGISTER_STUB(div_true_stub, &ember::divKernel);

namespace ember {

using at::Scalar;
using at::Tensor;

// Chapter 14's host kernel (EmberHostKernel.cpp) computes the dtypes the
// loops lack (float16, bfloat16, complex, int32, ...) with the CPU's kernels
// on the device's memory; meta() checks the arguments and sizes out first.
// add's structured class is generated from a "ufunc" description; its
// CPU-named class is the device-generic entry, which calls
// add_stub(device_type(), ...). sub, mul and div are ordinary structured ops.
Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha,
                Tensor& out) {
  using Native = at::native::structured_ufunc_add_CPU;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other, alpha);
  }
  StructuredOut<Native>(out).meta(self, other, alpha);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::add_out>::call(
      self, other, alpha, out);
}
Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha,
                Tensor& out) {
  using Native = at::native::structured_sub_out;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other, alpha);
  }
  StructuredOut<Native>(out).meta(self, other, alpha);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::sub_out>::call(
      self, other, alpha, out);
}
Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  using Native = at::native::structured_mul_out;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other);
  }
  StructuredOut<Native>(out).meta(self, other);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::mul_out>::call(
      self, other, out);
}
Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out) {
  using Native = at::native::structured_div_out;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other);
  }
  StructuredOut<Native>(out).meta(self, other);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::div_out>::call(
      self, other, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.out", &add_out);
  m.impl("sub.out", &sub_out);
  m.impl("mul.out", &mul_out);
  m.impl("div.out", &div_out);
}

} // namespace ember
// ember-book: end binary_ops

// Functional kernels for the four (EmberStructured.h says why): one meta(),
// the result allocated directly, and the out= kernel above when the loops
// lack a dtype. In-place add_ etc. stay PyTorch's composite over add.out.
namespace ember {

// A binary operator's functional kernel: meta(self, other, extra...), then
// impl(..., result) when ember's loops compute every tensor; otherwise
// `out` (the operator's out= kernel: the host kernel for the other dtypes)
// computes into the result, as under the composite kernel this replaces.
template <typename Native, typename Out, typename... Extra>
at::Tensor structuredBinary(Out out, const at::Tensor& self,
                            const at::Tensor& other, const Extra&... extra) {
  // No device guard, as under the composite kernel: impl() launches on the
  // current device's current stream, where out= kernels launch.
  StructuredFunctional<Native> op;
  op.meta(self, other, extra...);
  at::Tensor& result = op.result();
  if (loopsCompute({result, self, other})) {
    op.impl(self, other, extra..., result);
  } else {
    out(self, other, extra..., result);
  }
  return std::move(result);
}

at::Tensor add(const at::Tensor& self, const at::Tensor& other,
               const at::Scalar& alpha) {
  return structuredBinary<at::native::structured_ufunc_add_CPU>(
      &add_out, self, other, alpha);
}
at::Tensor sub(const at::Tensor& self, const at::Tensor& other,
               const at::Scalar& alpha) {
  return structuredBinary<at::native::structured_sub_out>(&sub_out, self,
                                                          other, alpha);
}
at::Tensor mul(const at::Tensor& self, const at::Tensor& other) {
  return structuredBinary<at::native::structured_mul_out>(&mul_out, self,
                                                          other);
}
at::Tensor div(const at::Tensor& self, const at::Tensor& other) {
  return structuredBinary<at::native::structured_div_out>(&div_out, self,
                                                          other);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", &add);
  m.impl("sub.Tensor", &sub);
  m.impl("mul.Tensor", &mul);
  m.impl("div.Tensor", &div);
}

} // namespace ember

// ember-book: begin comparison_ops
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// The result is bool; the inputs arrive in their common dtype, which may be
// bool too (mask == mask).
template <typename Compare>
void compareKernel(const char* op, at::TensorIteratorBase& iter, Compare compare) {
  dispatchNumbersAndBool(op, iter.common_dtype(), [&](auto zero) {
    binaryLoop<bool, decltype(zero)>(op, iter, compare);
  });
}

#define EMBER_COMPARE_KERNEL(name, expression)                          \
  void name##Kernel(at::TensorIteratorBase& iter) {                     \
    compareKernel("aten::" #name, iter,                                 \
                  [](auto x, auto y) EMBER_INLINE { return expression; }); \
  }
EMBER_COMPARE_KERNEL(eq, x == y)
EMBER_COMPARE_KERNEL(ne, x != y)
EMBER_COMPARE_KERNEL(lt, x < y)
EMBER_COMPARE_KERNEL(le, x <= y)
EMBER_COMPARE_KERNEL(gt, x > y)
EMBER_COMPARE_KERNEL(ge, x >= y)
#undef EMBER_COMPARE_KERNEL

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(eq_stub, &ember::eqKernel);
EMBER_REGISTER_STUB(ne_stub, &ember::neKernel);
EMBER_REGISTER_STUB(lt_stub, &ember::ltKernel);
EMBER_REGISTER_STUB(le_stub, &ember::leKernel);
EMBER_REGISTER_STUB(gt_stub, &ember::gtKernel);
EMBER_REGISTER_STUB(ge_stub, &ember::geKernel);

namespace ember {

// Chapter 14's host kernel (EmberHostKernel.cpp) computes the dtypes the
// loops lack (float16, bfloat16, complex, int32, ...) with the CPU's kernels
// on the device's memory; meta() checks the arguments and sizes out first.
// Each comparison has a Tensor and a Scalar overload, both structured, both
// ending in the same stub (the scalar becomes a CPU scalar operand).
#define EMBER_COMPARE_OUT(name)                                              \
  at::Tensor& name##_tensor_out(const at::Tensor& self,                      \
                                const at::Tensor& other, at::Tensor& out) {  \
    using Native = at::native::structured_##name##_Tensor_out;               \
    if (loopsCompute({out, self, other})) {                                  \
      return structuredOut<Native>(out, self, other);                        \
    }                                                                        \
    StructuredOut<Native>(out).meta(self, other);                            \
    return at::native::call_fallback_fn<                                     \
        &hostKernel, at::_ops::name##_Tensor_out>::call(self, other, out);   \
  }                                                                          \
  at::Tensor& name##_scalar_out(const at::Tensor& self,                      \
                                const at::Scalar& other, at::Tensor& out) {  \
    using Native = at::native::structured_##name##_Scalar_out;               \
    if (loopsCompute({out, self})) {                                         \
      return structuredOut<Native>(out, self, other);                        \
    }                                                                        \
    StructuredOut<Native>(out).meta(self, other);                            \
    return at::native::call_fallback_fn<                                     \
        &hostKernel, at::_ops::name##_Scalar_out>::call(self, other, out);   \
  }
EMBER_COMPARE_OUT(eq)
EMBER_COMPARE_OUT(ne)
EMBER_COMPARE_OUT(lt)
EMBER_COMPARE_OUT(le)
EMBER_COMPARE_OUT(gt)
EMBER_COMPARE_OUT(ge)
#undef EMBER_COMPARE_OUT

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("eq.Tensor_out", &eq_tensor_out);
  m.impl("eq.Scalar_out", &eq_scalar_out);
  m.impl("ne.Tensor_out", &ne_tensor_out);
  m.impl("ne.Scalar_out", &ne_scalar_out);
  m.impl("lt.Tensor_out", &lt_tensor_out);
  m.impl("lt.Scalar_out", &lt_scalar_out);
  m.impl("le.Tensor_out", &le_tensor_out);
  m.impl("le.Scalar_out", &le_scalar_out);
  m.impl("gt.Tensor_out", &gt_tensor_out);
  m.impl("gt.Scalar_out", &gt_scalar_out);
  m.impl("ge.Tensor_out", &ge_tensor_out);
  m.impl("ge.Scalar_out", &ge_scalar_out);
}

} // namespace ember
// ember-book: end comparison_ops

// Not shown in the book (outside any region): the package's own kernels for
// maximum and minimum, which reached the CPU fallback before. Written as the
// chapters' binary_ops are: a stub kernel for the loops' dtypes, the host
// kernel for the rest.
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// As the CPU's kernels: a NaN on either side wins, and on bool tensors
// maximum is "or" and minimum is "and".
template <typename Pick>
void extremumKernel(const char* op, at::TensorIteratorBase& iter, Pick pick) {
  dispatchNumbersAndBool(op, iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>(op, iter, [pick](T x, T y) EMBER_INLINE {
      if constexpr (std::is_floating_point_v<T>) {
        if (x != x) {
          return x;
        }
        if (y != y) {
          return y;
        }
      }
      return T(pick(x, y));
    });
  });
}

void maximumKernel(at::TensorIteratorBase& iter) {
  extremumKernel("aten::maximum.out", iter,
                 [](auto x, auto y) EMBER_INLINE { return x < y ? y : x; });
}
void minimumKernel(at::TensorIteratorBase& iter) {
  extremumKernel("aten::minimum.out", iter,
                 [](auto x, auto y) EMBER_INLINE { return y < x ? y : x; });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(maximum_stub, &ember::maximumKernel);
EMBER_REGISTER_STUB(minimum_stub, &ember::minimumKernel);

namespace ember {

at::Tensor& maximum_out(const at::Tensor& self, const at::Tensor& other,
                        at::Tensor& out) {
  using Native = at::native::structured_maximum_out;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other);
  }
  StructuredOut<Native>(out).meta(self, other);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::maximum_out>::call(
      self, other, out);
}
at::Tensor& minimum_out(const at::Tensor& self, const at::Tensor& other,
                        at::Tensor& out) {
  using Native = at::native::structured_minimum_out;
  if (loopsCompute({out, self, other})) {
    return structuredOut<Native>(out, self, other);
  }
  StructuredOut<Native>(out).meta(self, other);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::minimum_out>::call(
      self, other, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("maximum.out", &maximum_out);
  m.impl("minimum.out", &minimum_out);
}

} // namespace ember
