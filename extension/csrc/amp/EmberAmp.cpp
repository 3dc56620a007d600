// Mixed precision on ember (the autocast chapter): what autocast and GradScaler need
// from the device beyond the autocast wrappers (EmberAutocast.cpp).
//
// - Matrix products in float16 and bfloat16. The simulated device's gemm
//   computes in float32 (EmberBlas.h); like a tensor core it takes the
//   lower-precision inputs, accumulates in float32 and rounds the result.
// - Convolution, forward and backward, in float16 and bfloat16 the same
//   way, around the convolution chapter's float32 kernels.
// - GradScaler's two operators, as ember kernels: unscale the gradients and
//   flag an inf or NaN; grow or back off the scale.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/convolution_backward_native.h>
#include <ATen/ops/convolution_native.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <type_traits>

#include "aten/EmberBlas.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin amp_matmul
namespace ember::amp {

bool lowerPrecision(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// Float16 or bfloat16 operands: compute in float32 on the device, round the
// result to the operands' dtype. Anything else: the out= kernels of chapter
// 5 (which also reject a mix of dtypes, with their message).
at::Tensor mm(const at::Tensor& self, const at::Tensor& mat2) {
  if (lowerPrecision(self) && self.scalar_type() == mat2.scalar_type()) {
    return at::mm(self.to(at::kFloat), mat2.to(at::kFloat))
        .to(self.scalar_type());
  }
  at::Tensor out = at::empty({0}, self.options());
  return at::mm_out(out, self, mat2);
}

at::Tensor bmm(const at::Tensor& self, const at::Tensor& mat2) {
  if (lowerPrecision(self) && self.scalar_type() == mat2.scalar_type()) {
    return at::bmm(self.to(at::kFloat), mat2.to(at::kFloat))
        .to(self.scalar_type());
  }
  at::Tensor out = at::empty({0}, self.options());
  return at::bmm_out(out, self, mat2);
}

at::Tensor addmm(const at::Tensor& input, const at::Tensor& mat1,
                 const at::Tensor& mat2, const c10::Scalar& beta,
                 const c10::Scalar& alpha) {
  const at::ScalarType dtype = mat1.scalar_type();
  if (lowerPrecision(mat1) && mat2.scalar_type() == dtype &&
      input.scalar_type() == dtype) {
    return at::addmm(input.to(at::kFloat), mat1.to(at::kFloat),
                     mat2.to(at::kFloat), beta, alpha)
        .to(dtype);
  }
  at::Tensor out = at::empty({0}, mat1.options());
  return at::addmm_out(out, input, mat1, mat2, beta, alpha);
}

} // namespace ember::amp

// The functional forms: their default kernels would allocate the result and
// call the out= kernels, which compute in float32, float64 and int64 only.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm", TORCH_FN(ember::amp::mm));
  m.impl("bmm", TORCH_FN(ember::amp::bmm));
  m.impl("addmm", TORCH_FN(ember::amp::addmm));
}
// ember-book: end amp_matmul

// ember-book: begin amp_convolution
namespace ember::amp {

// Chapter 6 registered convolution_overrideable and its backward for ember,
// float32 and float64 only. One level up are aten::convolution and
// aten::convolution_backward, whose default kernels (the at::native
// functions below) check the arguments, turn 1-D into 2-D and call chapter
// 6's. Ember registers those two: float16 or bfloat16 operands are widened
// on the device, the float32 call goes down the usual path, and the result
// is rounded back. Any other dtype, or a mix, takes the default path, with
// its checks and messages.
bool sameLowerPrecision(const at::Tensor& a, const at::Tensor& b,
                        const std::optional<at::Tensor>& c = std::nullopt) {
  return lowerPrecision(a) && b.scalar_type() == a.scalar_type() &&
         (!c.has_value() || !c->defined() ||
          c->scalar_type() == a.scalar_type());
}

at::Tensor widen(const at::Tensor& t) {
  return t.defined() ? t.to(at::kFloat) : t;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding,
                       at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  if (sameLowerPrecision(input, weight, bias)) {
    const std::optional<at::Tensor> bias32 =
        bias.has_value() ? std::optional(widen(*bias)) : std::nullopt;
    return at::convolution(widen(input), widen(weight), bias32, stride,
                           padding, dilation, transposed, output_padding,
                           groups)
        .to(input.scalar_type());
  }
  return at::native::convolution(input, weight, bias, stride, padding,
                                 dilation, transposed, output_padding, groups);
}

// Autograd saves the forward's float16 input and weight: backward gets them
// with a float16 grad_output and returns float16 gradients, which the cast
// nodes autocast recorded turn into float32 for float32 parameters.
std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackward(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, at::OptionalIntArrayRef bias_sizes,
    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation,
    bool transposed, at::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> output_mask) {
  if (sameLowerPrecision(input, weight, grad_output)) {
    const at::ScalarType dtype = input.scalar_type();
    auto [grad_input, grad_weight, grad_bias] = at::convolution_backward(
        widen(grad_output), widen(input), widen(weight), bias_sizes, stride,
        padding, dilation, transposed, output_padding, groups, output_mask);
    const auto round = [dtype](const at::Tensor& t) {
      return t.defined() ? t.to(dtype) : t;
    };
    return {round(grad_input), round(grad_weight), round(grad_bias)};
  }
  return at::native::convolution_backward(
      grad_output, input, weight, bias_sizes, stride, padding, dilation,
      transposed, output_padding, groups, output_mask);
}

} // namespace ember::amp

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution", TORCH_FN(ember::amp::convolution));
  m.impl("convolution_backward", TORCH_FN(ember::amp::convolutionBackward));
}
// ember-book: end amp_convolution

// ember-book: begin amp_unscale
namespace ember::amp {

// GradScaler's loss scale and its bookkeeping: one float32 (or int32)
// element on the device of the gradients, as CUDA has them.
void checkScalar(const char* op, const char* name, const at::Tensor& t,
                 at::ScalarType dtype, const at::Device& device) {
  TORCH_CHECK(t.device() == device, "ember: ", op, ": ", name, " must be on ",
              device, ", got ", t.device());
  TORCH_CHECK(t.numel() == 1 && t.scalar_type() == dtype, "ember: ", op,
              " on ", device, ": ", name, " must be a one-element ", dtype,
              " tensor, got ", t.numel(), " elements of ", t.scalar_type());
}

// On the device: grad *= inv_scale, and found_inf = 1 if any element of
// grad is inf or NaN. Computed in float32 (float64 for double gradients).
template <typename T>
void unscaleLoop(T* grad, int64_t n, const float* inv_scale,
                 float* found_inf) {
  using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const Acc scale = *inv_scale;
  bool finite = true;
  for (int64_t i = 0; i < n; ++i) {
    const Acc value = static_cast<Acc>(grad[i]);
    finite = finite && std::isfinite(value);
    grad[i] = static_cast<T>(value * scale);
  }
  if (!finite) {
    *found_inf = 1.0f;
  }
}

void nonFiniteCheckAndUnscale(at::TensorList grads, at::Tensor& found_inf,
                              const at::Tensor& inv_scale) {
  constexpr const char* op = "aten::_amp_foreach_non_finite_check_and_unscale_";
  const at::Device device = found_inf.device();
  TORCH_CHECK(device.is_privateuseone(), "ember: ", op, ": found_inf must be "
              "on an ember device, got ", device);
  checkScalar(op, "found_inf", found_inf, at::kFloat, device);
  checkScalar(op, "inv_scale", inv_scale, at::kFloat, device);
  const c10::DeviceGuard guard(device);
  for (const at::Tensor& grad : grads) {
    TORCH_CHECK(grad.device() == device, "ember: ", op, ": every gradient "
                "must be on ", device, " (found_inf's device), got one on ",
                grad.device());
    TORCH_CHECK(grad.is_floating_point(), "ember: ", op, " on ", device,
                ": gradients must be floating point, got ",
                grad.scalar_type());
    if (grad.numel() == 0) {
      continue;
    }
    // The loop wants contiguous memory: a strided gradient is unscaled in
    // a contiguous copy, which is written back.
    at::Tensor work = grad.is_contiguous() ? grad : grad.contiguous();
    AT_DISPATCH_FLOATING_TYPES_AND2(
        at::kHalf, at::kBFloat16, work.scalar_type(), "ember_unscale", [&] {
          scalar_t* data = work.mutable_data_ptr<scalar_t>();
          const float* scale = inv_scale.const_data_ptr<float>();
          float* inf = found_inf.mutable_data_ptr<float>();
          const int64_t n = work.numel();
          launchRecorded({data, scale, inf}, [=](ptrdiff_t offset) {
            unscaleLoop(atOffset(data, offset), n,
                        atOffset(scale, offset),
                        atOffset(inf, offset));
          });
        });
    if (!work.is_same(grad)) {
      grad.copy_(work);
    }
  }
}

} // namespace ember::amp

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_",
         TORCH_FN(ember::amp::nonFiniteCheckAndUnscale));
}
// ember-book: end amp_unscale

// ember-book: begin amp_update_scale
namespace ember::amp {

// On the device: after an inf or NaN, scale *= backoff and the count of
// good steps restarts; after `interval` good steps in a row, scale *=
// growth (unless that overflows float32) and the count restarts.
void updateScaleKernel(float* scale, int32_t* good_steps,
                       const float* found_inf, double growth, double backoff,
                       int64_t interval) {
  if (*found_inf != 0.0f) {
    *scale = static_cast<float>(*scale * backoff);
    *good_steps = 0;
    return;
  }
  const int64_t good = *good_steps + 1;
  if (good < interval) {
    *good_steps = static_cast<int32_t>(good);
    return;
  }
  const auto grown = static_cast<float>(*scale * growth);
  if (std::isfinite(grown)) {
    *scale = grown;
  }
  *good_steps = 0;
}

at::Tensor& updateScale(at::Tensor& scale, at::Tensor& growth_tracker,
                        const at::Tensor& found_inf, double growth,
                        double backoff, int64_t interval) {
  constexpr const char* op = "aten::_amp_update_scale_";
  const at::Device device = scale.device();
  checkScalar(op, "scale", scale, at::kFloat, device);
  checkScalar(op, "growth_tracker", growth_tracker, at::kInt, device);
  checkScalar(op, "found_inf", found_inf, at::kFloat, device);
  const c10::DeviceGuard guard(device);
  float* s = scale.mutable_data_ptr<float>();
  int32_t* good = growth_tracker.mutable_data_ptr<int32_t>();
  const float* inf = found_inf.const_data_ptr<float>();
  launchRecorded({s, good, inf}, [=](ptrdiff_t offset) {
    updateScaleKernel(atOffset(s, offset), atOffset(good, offset),
                      atOffset(inf, offset), growth, backoff, interval);
  });
  return scale;
}

} // namespace ember::amp

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_update_scale_", TORCH_FN(ember::amp::updateScale));
}
// ember-book: end amp_update_scale
