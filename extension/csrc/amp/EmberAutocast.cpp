// Autocast on ember (the autocast chapter): the kernels at DispatchKey::AutocastPrivateUse1.
//
// torch.autocast(device_type=<ember>) turns that key on for the thread. Every
// operator then enters it first: most fall through to the keys below, the
// listed ones get a wrapper that casts their floating-point ember inputs to
// the operator's dtype (the autocast dtype, or float32), turns the key off
// and redispatches. ember::custom_abs, which computes only in float32 and
// float64, gets an fp32 wrapper of its own.
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

#include "aten/EmberCustomOps.h"

// ember-book: begin autocast_fallthrough
// With autocast on, every operator on an ember tensor enters
// AutocastPrivateUse1. Those without a wrapper skip the key: a fallthrough
// for every operator, as the key had none.
TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}
// ember-book: end autocast_fallthrough

// ember-book: begin autocast_mm
namespace ember {

// mm under autocast: both inputs in the autocast dtype (float16 unless the
// region says otherwise), then mm itself. cached_cast casts a floating-point
// tensor of the given device type (not float64) and leaves anything else as
// it is; the device type defaults to CUDA, so it must be told.
at::Tensor mmAutocast(const at::Tensor& self, const at::Tensor& mat2) {
  // The key is off for the rest of this call: the casts and mm run as plain
  // calls, and an operator mm calls inside is not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  constexpr auto device = c10::DeviceType::PrivateUse1;
  const at::ScalarType dtype = at::autocast::get_autocast_dtype(device);
  return at::mm(at::autocast::cached_cast(dtype, self, device),
                at::autocast::cached_cast(dtype, mat2, device));
}

} // namespace ember

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  m.impl("mm", TORCH_FN(ember::mmAutocast));
}
// ember-book: end autocast_mm

// ember-book: begin autocast_lists
// The same wrapper, generated: KERNEL_PRIVATEUSEONE(op[, overload], policy)
// instantiates PyTorch's template for the operator's signature and registers
// it. Each line is one template instantiation (~0.1 s of compile time), so
// ember lists the operators it runs, not all of AT_FORALL_LOWER_PRECISION_FP.
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  // In the autocast dtype: the matrix products (mm is written out above).
  KERNEL_PRIVATEUSEONE(addmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(bmm, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(matmul, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(linear, lower_precision_fp)
  // Convolutions, as far as ember runs them (2-D kernels, which 1-D reuses;
  // not 3-D, not transposed): conv1d/conv2d and the operators below them,
  // for a caller that enters there.
  KERNEL_PRIVATEUSEONE(conv1d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(conv2d, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(convolution, lower_precision_fp)
  KERNEL_PRIVATEUSEONE(_convolution, lower_precision_fp)
  // In float32, where float16's range or precision is not enough. softmax
  // and log_softmax take an output dtype: the wrapper sets it to float32.
  KERNEL_PRIVATEUSEONE(softmax, int, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(log_softmax, int, fp32_set_opt_dtype)
  KERNEL_PRIVATEUSEONE(mse_loss, fp32)
  KERNEL_PRIVATEUSEONE(nll_loss, fp32)
  KERNEL_PRIVATEUSEONE(exp, fp32)
  // In the widest floating dtype among the inputs.
  KERNEL_PRIVATEUSEONE(addcmul, promote)
  KERNEL_PRIVATEUSEONE(addcdiv, promote)
}
// ember-book: end autocast_lists

// ember-book: begin autocast_custom_abs
namespace ember {

// custom_abs computes in float32 and float64 only: under autocast its input
// is often float16 (an mm's output), so it runs in float32, the fp32 policy.
at::Tensor customAbsAutocast(const at::Tensor& self) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  return customAbsOp().call(at::autocast::cached_cast(
      at::kFloat, self, c10::DeviceType::PrivateUse1));
}

} // namespace ember

// The device's own key: DispatchKey::Autocast is AutocastCUDA's alias.
TORCH_LIBRARY_IMPL(ember, AutocastPrivateUse1, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsAutocast));
}
// ember-book: end autocast_custom_abs
