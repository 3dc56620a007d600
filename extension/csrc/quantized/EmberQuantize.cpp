// Quantizing and dequantizing on ember: float tensors to quantized ones and
// back, per tensor and per channel.
#include "aten/EmberHostKernels.h"
#include "aten/EmberLoops.h"
#include "quantized/EmberQuantized.h"

// ember-book: begin quantize_stubs
#include <ATen/core/Tensor.h>
#include <ATen/native/quantized/AffineQuantizer.h>
#include <ATen/ops/dequantize_native.h>
#include <ATen/ops/quantize_per_channel_native.h>
#include <ATen/ops/quantize_per_tensor_dynamic_native.h>
#include <ATen/ops/quantize_per_tensor_native.h>
#include <torch/library.h>

namespace ember {

// ATen's quantizers are device-generic up to one point. quantize_per_tensor
// makes a PerTensorAffineQuantizer, whose quantize() allocates the result
// (new_qtensor: the device's allocator, so ember memory) and calls
// at::native::quantize_tensor_per_tensor_affine, which checks the arguments
// and calls a DispatchStub for the arithmetic, by device type. ember fills
// the stubs' PrivateUse1 slots. Each slot calls that same exported function
// again inside one launch, on host views of ember's memory: they are CPU
// tensors, so it picks the stub's CPU kernel. (The stub's own call operator
// is not exported from libtorch: an extension cannot call a stub directly.)
// The rounding (std::nearbyint, or FBGEMM's vectorized loops where the CPU
// uses them) is the CPU's own, so the integers are the CPU's bit for bit.

void quantizePerTensor(const at::Tensor& rtensor, at::Tensor& qtensor,
                       double scale, int64_t zero_point) {
  quantizedOnHost("quantize_per_tensor", {&rtensor, &qtensor},
                  [&](ptrdiff_t offset) {
                    at::Tensor q = hostQuantized(qtensor, offset);
                    at::native::quantize_tensor_per_tensor_affine(
                        HostView(offset)(rtensor), q, scale, zero_point);
                  });
}

void dequantizePerTensor(const at::Tensor& qtensor, at::Tensor& rtensor,
                         double scale, int64_t zero_point) {
  quantizedOnHost("dequantize", {&qtensor, &rtensor}, [&](ptrdiff_t offset) {
    at::Tensor r = HostView(offset)(rtensor);
    at::native::dequantize_tensor_per_tensor_affine(
        hostQuantized(qtensor, offset), r, scale, zero_point);
  });
}

// Per channel: the scales and zero points are tensors, on ember or on the
// CPU (wherever the caller made them; HostView leaves CPU ones as they are).
template <typename Function>
void perChannel(const char* op, Function function, bool quantizing,
                const at::Tensor& from, at::Tensor& to,
                const at::Tensor& scales, const at::Tensor& zero_points,
                int64_t axis) {
  quantizedOnHost(op, {&from, &to, &scales, &zero_points},
                  [&](ptrdiff_t offset) {
                    const HostView host(offset);
                    at::Tensor source =
                        quantizing ? host(from) : hostQuantized(from, offset);
                    at::Tensor target =
                        quantizing ? hostQuantized(to, offset) : host(to);
                    function(source, target, host(scales), host(zero_points),
                             axis);
                  });
}

void quantizePerChannel(const at::Tensor& rtensor, at::Tensor& qtensor,
                        const at::Tensor& scales, const at::Tensor& zero_points,
                        int64_t axis) {
  perChannel("quantize_per_channel",
             at::native::quantize_tensor_per_channel_affine, true,
             rtensor, qtensor, scales, zero_points, axis);
}

void quantizePerChannelFloat(const at::Tensor& rtensor, at::Tensor& qtensor,
                             const at::Tensor& scales,
                             const at::Tensor& zero_points, int64_t axis) {
  perChannel("quantize_per_channel",
             at::native::quantize_tensor_per_channel_float_qparams, true,
             rtensor, qtensor, scales, zero_points, axis);
}

void dequantizePerChannel(const at::Tensor& qtensor, at::Tensor& rtensor,
                          const at::Tensor& scales,
                          const at::Tensor& zero_points, int64_t axis) {
  perChannel("dequantize", at::native::dequantize_tensor_per_channel_affine,
             false, qtensor, rtensor, scales, zero_points, axis);
}

void dequantizePerChannelFloat(const at::Tensor& qtensor, at::Tensor& rtensor,
                               const at::Tensor& scales,
                               const at::Tensor& zero_points, int64_t axis) {
  perChannel("dequantize",
             at::native::dequantize_tensor_per_channel_float_qparams,
             false, qtensor, rtensor, scales, zero_points, axis);
}

// quint4x2 and quint2x4 (two or four values a byte) have stubs of their own,
// which the exported functions pick by dtype. They pass scale and zero point
// as floats, converted from the quantizer's double and int64: converting
// back gives the same values, and the CPU's stub converts them again.
void quantizeSubByte(const at::Tensor& rtensor, at::Tensor& qtensor,
                     float scale, float zero_point) {
  quantizedOnHost("quantize_per_tensor", {&rtensor, &qtensor},
                  [&](ptrdiff_t offset) {
                    at::Tensor q = hostQuantized(qtensor, offset);
                    at::native::quantize_tensor_per_tensor_affine(
                        HostView(offset)(rtensor), q, scale,
                        static_cast<int64_t>(zero_point));
                  });
}

void dequantizeSubByte(const at::Tensor& qtensor, at::Tensor& rtensor,
                       float scale, float zero_point) {
  quantizedOnHost("dequantize", {&qtensor, &rtensor}, [&](ptrdiff_t offset) {
    at::Tensor r = HostView(offset)(rtensor);
    at::native::dequantize_tensor_per_tensor_affine(
        hostQuantized(qtensor, offset), r, scale,
        static_cast<int64_t>(zero_point));
  });
}

} // namespace ember

EMBER_REGISTER_STUB(quantize_tensor_per_tensor_affine_stub,
                    &ember::quantizePerTensor);
EMBER_REGISTER_STUB(dequantize_tensor_per_tensor_affine_stub,
                    &ember::dequantizePerTensor);
EMBER_REGISTER_STUB(quantize_tensor_per_channel_affine_stub,
                    &ember::quantizePerChannel);
EMBER_REGISTER_STUB(quantize_tensor_per_channel_float_qparams_stub,
                    &ember::quantizePerChannelFloat);
EMBER_REGISTER_STUB(dequantize_tensor_per_channel_affine_stub,
                    &ember::dequantizePerChannel);
EMBER_REGISTER_STUB(dequantize_tensor_per_channel_float_qparams_stub,
                    &ember::dequantizePerChannelFloat);
EMBER_REGISTER_STUB(quantize_tensor_per_tensor_affine_sub_byte_stub,
                    &ember::quantizeSubByte);
EMBER_REGISTER_STUB(dequantize_tensor_per_tensor_affine_sub_byte_stub,
                    &ember::dequantizeSubByte);
// ember-book: end quantize_stubs

// ember-book: begin quantize_ops
// The operators. Their inputs are plain float tensors, so they dispatch to
// PrivateUse1; ATen's generic functions make the quantizer and call the
// stubs above, inside the input's device guard (DeviceGuarded). Without
// these, the CPU fallback would quantize on the CPU and then fail to bring
// the quantized result back (no Quantizedember kernels).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using ember::DeviceGuarded;
  m.impl("quantize_per_tensor",
         TORCH_FN(DeviceGuarded<at::native::quantize_per_tensor>::call));
  m.impl("quantize_per_tensor.tensor_qparams",
         TORCH_FN(DeviceGuarded<
                  at::native::quantize_per_tensor_tensor_qparams>::call));
  // A loop of quantize_per_tensor (the "_cpu" in its name is historical).
  m.impl("quantize_per_tensor.tensors",
         TORCH_FN(at::native::quantize_per_tensor_list_cpu));
  m.impl("quantize_per_tensor_dynamic",
         TORCH_FN(
             DeviceGuarded<at::native::quantize_per_tensor_dynamic>::call));
  m.impl("quantize_per_channel",
         TORCH_FN(DeviceGuarded<at::native::quantize_per_channel>::call));
  // dequantize of a plain tensor is .to(float), as on the CPU.
  m.impl("dequantize.self", TORCH_FN(at::native::dequantize_cpu_or_cuda));
}

// A quantized ember tensor dispatches to QuantizedPrivateUse1.
TORCH_LIBRARY_IMPL(aten, QuantizedPrivateUse1, m) {
  using ember::DeviceGuarded;
  m.impl("dequantize.self",
         TORCH_FN(DeviceGuarded<at::native::dequantize_quantized>::call));
  m.impl("dequantize.tensors", // a loop of the above
         TORCH_FN(at::native::dequantize_tensors_quantized_cpu));
}
// ember-book: end quantize_ops
