// Batch normalization on ember, forward and backward: ATen's CPU kernels run
// inside an ember launch on the device's memory (EmberHostKernels.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/native_batch_norm.h>
#include <ATen/ops/native_batch_norm_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>

#include "aten/EmberHostKernels.h"
#include "aten/EmberHostOwned.h"

// ember-book: begin batch_norm
namespace ember {

using at::Tensor;
using OptionalTensor = std::optional<Tensor>;

// The statistics (saved mean and inverse std, running stats, weight
// gradients) are in the parameters' dtype: float32 next to a float16 input
// when autocast or a user mixes them, the input's dtype otherwise.
at::ScalarType statsType(const Tensor& input,
                         std::initializer_list<const OptionalTensor*> params) {
  for (const OptionalTensor* p : params) {
    if (p->has_value() && (*p)->defined()) {
      return (*p)->scalar_type();
    }
  }
  return input.scalar_type();
}

void checkBatchNorm(const char* op, const Tensor& input) {
  TORCH_CHECK(input.dim() >= 2, "ember: ", op, " on ", input.device(),
              " expects an input with a channel dimension (2-D or more), "
              "got ", input.dim(), "-D");
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), "ember: ", op, " on ",
              input.device(), " expects a floating point input, got ",
              input.scalar_type());
}

// Training: normalizes with the batch's statistics, returns them (for the
// backward) and updates the running ones in place. Evaluation: uses the
// running statistics, and returns them as the saved ones (the mean and
// 1 / sqrt(var + eps), one per channel). The CPU returns empty ones there,
// but PyTorch's meta kernel, which torch.compile plans with, gives every
// other device CUDA's (C,) (chapter 18).
// ATen's CPU out= kernels read an input whose strides are neither
// contiguous nor channels-last wrongly (a `[..., ::2]` view gives other
// numbers than the functional CPU call), so the kernels hand them a dense
// copy in the input's suggested layout.
Tensor dense(const Tensor& t) {
  return t.contiguous(t.suggest_memory_format());
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm(
    const Tensor& input_, const OptionalTensor& weight,
    const OptionalTensor& bias, const OptionalTensor& running_mean,
    const OptionalTensor& running_var, bool training, double momentum,
    double eps) {
  constexpr const char* op = "aten::native_batch_norm";
  checkBatchNorm(op, input_);
  const c10::DeviceGuard guard(input_.device());
  const Tensor input = dense(input_);
  const auto stats = input.options().dtype(
      statsType(input, {&weight, &bias, &running_mean, &running_var}));
  const int64_t channels = training ? input.size(1) : 0;
  Tensor out = at::empty(input.sizes(),
                         input.options().memory_format(input.suggest_memory_format()));
  Tensor save_mean = at::empty({channels}, stats);
  Tensor save_invstd = at::empty({channels}, stats);
  onHostOwned(op, input.device(),
         {&input, &orUndefined(weight), &orUndefined(bias),
          &orUndefined(running_mean), &orUndefined(running_var), &out,
          &save_mean, &save_invstd},
         [=](const HostView& host) {
           Tensor h_out = host(out), h_mean = host(save_mean),
                  h_invstd = host(save_invstd);
           at::native_batch_norm_outf(host(input), host(weight), host(bias),
                                      host(running_mean), host(running_var),
                                      training, momentum, eps, h_out, h_mean,
                                      h_invstd);
         });
  if (!training && orUndefined(running_mean).defined() &&
      orUndefined(running_var).defined()) {
    save_mean = running_mean->to(stats, /*non_blocking=*/false,
                                 /*copy=*/true);
    save_invstd = running_var->to(stats).add(eps).rsqrt();
  }
  return {out, save_mean, save_invstd};
}

// The functional batch norm torch.export and torch.compile trace to: the
// same kernel (with or without running statistics), so that evaluation
// also returns (C,) statistics there.
std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit(
    const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, Tensor& running_mean, Tensor& running_var,
    bool training, double momentum, double eps) {
  return ember::native_batch_norm(input, weight, bias, running_mean,
                                  running_var, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_legit_no_stats(
    const Tensor& input, const OptionalTensor& weight,
    const OptionalTensor& bias, bool training, double momentum, double eps) {
  return ember::native_batch_norm(input, weight, bias, std::nullopt,
                                  std::nullopt, training, momentum, eps);
}

std::tuple<Tensor, Tensor, Tensor> native_batch_norm_backward(
    const Tensor& grad_out_, const Tensor& input_, const OptionalTensor& weight,
    const OptionalTensor& running_mean, const OptionalTensor& running_var,
    const OptionalTensor& save_mean, const OptionalTensor& save_invstd,
    bool train, double eps, std::array<bool, 3> output_mask) {
  constexpr const char* op = "aten::native_batch_norm_backward";
  checkBatchNorm(op, input_);
  TORCH_CHECK(grad_out_.sizes() == input_.sizes(), "ember: ", op, " on ",
              input_.device(), " expects grad_out of the input's shape ",
              input_.sizes(), ", got ", grad_out_.sizes());
  const c10::DeviceGuard guard(input_.device());
  const Tensor input = dense(input_);
  const Tensor grad_out = grad_out_.contiguous(input.suggest_memory_format());
  const auto stats = input.options().dtype(
      statsType(input, {&weight, &running_mean, &save_mean}));
  // The results the mask asks for are copied into these (ATen's out=
  // overload refuses a result it leaves undefined, e.g. with no weight).
  Tensor grad_input = at::empty(
      input.sizes(), input.options().memory_format(input.suggest_memory_format()));
  Tensor grad_weight = at::empty({input.size(1)}, stats);
  Tensor grad_bias = at::empty({input.size(1)}, stats);
  onHostOwned(op, input.device(),
         {&grad_out, &input, &orUndefined(weight), &orUndefined(running_mean),
          &orUndefined(running_var), &orUndefined(save_mean),
          &orUndefined(save_invstd), &grad_input, &grad_weight, &grad_bias},
         [=](const HostView& host) {
           const auto [gi, gw, gb] = at::native_batch_norm_backward(
               host(grad_out), host(input), host(weight), host(running_mean),
               host(running_var), host(save_mean), host(save_invstd), train,
               eps, output_mask);
           for (const auto& [result, out] :
                {std::pair{gi, &grad_input}, std::pair{gw, &grad_weight},
                 std::pair{gb, &grad_bias}}) {
             if (result.defined()) {
               host(*out).copy_(result);
             }
           }
         });
  return {output_mask[0] ? grad_input : Tensor(),
          output_mask[1] ? grad_weight : Tensor(),
          output_mask[2] ? grad_bias : Tensor()};
}

// Layer and group normalization: their default kernels for a backend
// without its own (math_native_layer_norm, math_group_norm) compose ember's
// operators, and in bfloat16 or float16 each step (mean, variance, the
// normalized values) rounds to the input's dtype; the CPU's kernels
// accumulate in float. The host kernel runs the CPU's (their backwards go
// to the CPU fallback, which also runs the CPU's kernels).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_batch_norm", TORCH_FN(native_batch_norm));
  m.impl("native_batch_norm_backward", TORCH_FN(native_batch_norm_backward));
  m.impl("_native_batch_norm_legit", TORCH_FN(native_batch_norm_legit));
  m.impl("_native_batch_norm_legit.no_stats",
         TORCH_FN(native_batch_norm_legit_no_stats));
  m.impl("native_layer_norm",
         torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
  m.impl("native_group_norm",
         torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
}

} // namespace ember
// ember-book: end batch_norm
