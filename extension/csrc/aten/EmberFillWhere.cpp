// fill_, zero_ and where: loops that move elements without computing.
#include <ATen/core/Tensor.h>
#include <ATen/native/Fill.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/zero_native.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>

#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"
#include "aten/EmberHostKernels.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin fill_where
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// fill_ and where only move elements, never compute with them: their loops
// need the element's size, not its dtype, and five copies cover every dtype:
// 1 to 8 bytes, and 16 for complex128 (the conformance sweep of chapter 14
// found its gradients failing here: a complex result's backward fills one).
struct Bits128 {
  uint64_t half[2];
};

template <typename Bits>
void fillLoop(at::TensorIterator& iter, Bits bits) {
  launchRecorded("aten::fill_", iter,
                 [bits](at::TensorIteratorBase& it,
                        const KernelOperands& operands) {
    it.for_each([&](char** data, const int64_t* strides, int64_t n) {
      Bits* out = operands.at<Bits>(data, 0);
      if (strides[0] == sizeof(Bits)) {
        for (int64_t i = 0; i < n; ++i) out[i] = bits;
      } else {
        for (int64_t i = 0; i < n; ++i) element(out, strides[0], i) = bits;
      }
    });
  });
}

template <typename Bits>
Bits bitsOf(const at::Tensor& host_value) {
  Bits bits;
  std::memcpy(&bits, host_value.const_data_ptr(), sizeof(Bits));
  return bits;
}

void fillKernel(at::TensorIterator& iter, const at::Scalar& value) {
  if (iter.numel() == 0) {
    return;
  }
  // The value in the tensor's dtype, converted on the host by ATen's CPU
  // fill_, which also refuses values the dtype cannot hold.
  const at::Tensor host =
      at::empty({}, at::TensorOptions().dtype(iter.dtype(0))).fill_(value);
  switch (host.itemsize()) {
    case 1: return fillLoop(iter, bitsOf<uint8_t>(host));
    case 2: return fillLoop(iter, bitsOf<uint16_t>(host));
    case 4: return fillLoop(iter, bitsOf<uint32_t>(host));
    case 8: return fillLoop(iter, bitsOf<uint64_t>(host));
    case 16: return fillLoop(iter, bitsOf<Bits128>(host));
    default:
      TORCH_CHECK(false, "ember: aten::fill_ has no ember kernel for ",
                  iter.dtype(0), " tensors on ", c10::get_privateuse1_backend());
  }
}

// out = condition ? self : other, elementwise. ATen's where_self_out has
// already converted self and other to the result dtype.
template <typename Bits>
void whereLoop(at::TensorIterator& iter) {
  launchRecorded("aten::where.self_out", iter,
                 [](at::TensorIteratorBase& it,
                    const KernelOperands& operands) {
    it.for_each([&](char** data, const int64_t* s, int64_t n) {
      Bits* out = operands.at<Bits>(data, 0);
      const bool* c = operands.at<bool>(data, 1);
      const Bits* a = operands.at<Bits>(data, 2);
      const Bits* b = operands.at<Bits>(data, 3);
      if (s[0] == sizeof(Bits) && s[1] == 1 && s[2] == sizeof(Bits) &&
          s[3] == sizeof(Bits)) {
        for (int64_t i = 0; i < n; ++i) out[i] = c[i] ? a[i] : b[i];
      } else {
        for (int64_t i = 0; i < n; ++i) {
          element(out, s[0], i) =
              element(c, s[1], i) ? element(a, s[2], i) : element(b, s[3], i);
        }
      }
    });
  });
}

void whereKernel(at::TensorIterator& iter) {
  if (iter.numel() == 0) {
    return;
  }
  switch (iter.element_size(0)) {
    case 1: return whereLoop<uint8_t>(iter);
    case 2: return whereLoop<uint16_t>(iter);
    case 4: return whereLoop<uint32_t>(iter);
    case 8: return whereLoop<uint64_t>(iter);
    case 16: return whereLoop<Bits128>(iter);
    default:
      TORCH_CHECK(false, "ember: aten::where has no ember kernel for ",
                  iter.dtype(0), " tensors on ", c10::get_privateuse1_backend());
  }
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(fill_stub, &ember::fillKernel);
EMBER_REGISTER_STUB(where_kernel, &ember::whereKernel);

namespace ember {

// None of these is structured; ATen's device-generic implementations build
// the TensorIterator and call the stubs above. fill_ and where have CPU and
// CUDA kernels only, so every overload that should run here is registered,
// zero_ (fill_ with 0) included.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", static_cast<at::Tensor& (*)(
                             at::Tensor&, const at::Scalar&)>(&at::native::fill_));
  m.impl("fill_.Tensor", static_cast<at::Tensor& (*)(
                             at::Tensor&, const at::Tensor&)>(&at::native::fill_));
  m.impl("zero_", &at::native::zero_);
  m.impl("where.self_out", &at::native::where_self_out);
  m.impl("where.self", static_cast<at::Tensor (*)(
                           const at::Tensor&, const at::Tensor&,
                           const at::Tensor&)>(&at::native::where));
}

} // namespace ember
// ember-book: end fill_where
