// Earlier versions of parts that chapter 07 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/autocast_mode.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/library.h>

// ember-book: begin autocast_mm.v1
namespace ember {

// mm under autocast: both inputs in the autocast dtype (float16 unless the
// region says otherwise), then mm itself.
at::Tensor mmAutocast(const at::Tensor& self, const at::Tensor& mat2) {
  // The key is off for the rest of this call: the casts and mm run as plain
  // calls, and an operator mm calls inside is not cast again.
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  const at::ScalarType dtype =
      at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1);
  return at::mm(at::autocast::cached_cast(dtype, self),
                at::autocast::cached_cast(dtype, mat2));
}

} // namespace ember

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  m.impl("mm", TORCH_FN(ember::mmAutocast));
}
// ember-book: end autocast_mm.v1

// ember-book: begin autocast_custom_abs.v1
namespace ember {

// Chapter 05's cached handle to ember::custom_abs (its unit defines it).
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)>& customAbsOp();

// custom_abs computes in float32 and float64 only: under autocast its input
// is often float16 (an mm's output), so it runs in float32, the fp32 policy.
at::Tensor customAbsAutocast(const at::Tensor& self) {
  c10::impl::ExcludeDispatchKeyGuard no_autocast(
      c10::DispatchKey::AutocastPrivateUse1);
  return customAbsOp().call(at::autocast::cached_cast(
      at::kFloat, self, c10::DeviceType::PrivateUse1));
}

} // namespace ember

TORCH_LIBRARY_IMPL(ember, Autocast, m) {
  m.impl("custom_abs", TORCH_FN(ember::customAbsAutocast));
}
// ember-book: end autocast_custom_abs.v1
