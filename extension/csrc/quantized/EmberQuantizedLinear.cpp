// Dynamic-quantized linear on ember: torch.ao.nn.quantized.dynamic.Linear's
// operator, quantized::linear_dynamic (and linear_relu_dynamic), for an
// ember input, computed on ember and equal to the CPU's result bit for bit.
#include "aten/EmberHostKernels.h"
#include "aten/EmberLaunch.h"
#include "aten/EmberRecordedLaunch.h"
#include "quantized/EmberQuantized.h"

// ember-book: begin quantized_linear
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/native/quantized/PackedParams.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/quantize_per_tensor_dynamic.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>
#include <ATen/quantized/Quantizer.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <typeinfo>
#include <vector>

namespace ember {

// The weight arrives packed: a LinearPackedParamsBase, a TorchScript custom
// class whose concrete type is the CPU engine's that packed it
// (torch.backends.quantized.engine at prepack time): FBGEMM's
// PackedLinearWeight (engines "x86", the default on x86, and "fbgemm"),
// oneDNN's PackedLinearWeightsOnednn ("onednn"), QNNPACK's
// PackedLinearWeightsQnnp ("qnnpack"). Its layout is the engine's own, but
// unpack() returns the plain quantized weight and the float bias, and from
// those ember computes what FBGEMM computes (measured against the CPU, see
// the README):
//   1. the input is quantized to quint8 per tensor with the parameters
//      ATen's quantize_per_tensor_dynamic chooses (its min and max, the same
//      ChooseQuantizationParams, reduce_range as given): the same integers
//      FBGEMM's packing makes;
//   2. the integers are multiplied and summed exactly:
//      acc = sum_k (x_q - x_zp) * (w_q - w_zp);
//   3. y = fma(acc, x_scale * w_scale, bias) in float32: FBGEMM fuses the
//      multiply and the add (one rounding). A separate multiply and add
//      differs in the last bit for about a third of the elements.
// The other engines' results differ from that in the last bits (oneDNN
// also rounds its parameters differently); for them ember runs the CPU's own
// kernel on ember's memory instead (the boxed host kernel).
bool packedByFbgemm(const LinearPackedParamsBase& packed) {
  // The concrete classes are not in the installed headers; their names are
  // in the type information.
  return std::strcmp(typeid(packed).name(), "18PackedLinearWeight") == 0;
}

// Step 3 as one ember kernel: out[i][j] = acc[i][j] * scale[j] + bias[j],
// one rounding, then ReLU for linear_relu_dynamic.
void requantize(const at::Tensor& acc, const at::Tensor& scale,
                const at::Tensor& bias, const at::Tensor& out, bool relu) {
  const int64_t rows = acc.size(0), cols = acc.size(1);
  launchRecorded(
      {acc.data_ptr(), scale.data_ptr(), bias.data_ptr(), out.data_ptr()},
      [=](ptrdiff_t offset) {
        const int64_t* a = atOffset(acc.const_data_ptr<int64_t>(), offset);
        const float* s = atOffset(scale.const_data_ptr<float>(), offset);
        const float* b = atOffset(bias.const_data_ptr<float>(), offset);
        float* y = atOffset(out.mutable_data_ptr<float>(), offset);
        for (int64_t i = 0; i < rows; ++i) {
          for (int64_t j = 0; j < cols; ++j) {
            const float raw = static_cast<float>(a[i * cols + j]);
            const float v = std::fma(raw, s[j], b[j]);
            y[i * cols + j] = relu ? std::max(v, 0.0f) : v;
          }
        }
      });
}

// The boxed kernel of quantized::linear_dynamic and linear_relu_dynamic
// (input, W_prepack, reduce_range) for PrivateUse1.
void linearDynamic(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto arguments = torch::jit::last(*stack, 3);
  const at::Tensor input = arguments[0].toTensor();
  // The custom-class object holds the C++ object in its one slot.
  // (IValue::toCustomClass would check the class through a registry keyed by
  // std::type_index, which is not reliable across shared libraries.)
  const auto packed =
      c10::static_intrusive_pointer_cast<LinearPackedParamsBase>(
          arguments[1].toObject()->getSlot(0).toCapsule());
  const bool reduce_range = arguments[2].toBool();
  const bool relu = op.schema().name() == "quantized::linear_relu_dynamic";
  auto [weight, bias] = packed->unpack();
  const bool per_channel = weight.qscheme() == at::kPerChannelAffine;
  if (!packedByFbgemm(*packed) || input.scalar_type() != at::kFloat ||
      weight.scalar_type() != at::kQInt8 ||
      !(per_channel || weight.qscheme() == at::kPerTensorAffine)) {
    // Anything else: the CPU's own kernel on ember's memory (EmberHostKernel).
    hostKernel(op, stack);
    return;
  }
  const c10::DeviceGuard guard(input.device());
  const int64_t k = weight.size(1), n = weight.size(0);
  // FBGEMM's checks, in its words.
  TORCH_CHECK(input.dim() >= 2, "The dimension of input tensor should be ",
              "larger than or equal to 2");
  TORCH_CHECK(input.size(-1) == k, "The number of rows in the packB should be ",
              "equal to K: ", input.size(-1));
  const at::Tensor x = input.reshape({-1, k}).contiguous();
  // 1. The input's integers, quantized on ember by the CPU's code.
  const at::Tensor xq = at::quantize_per_tensor_dynamic(x, at::kQUInt8,
                                                        reduce_range);
  const at::Tensor xi = intView(xq).to(at::kLong).sub(xq.q_zero_point());
  // 2. The weight's integers (host memory, unpacked) moved to ember; exact
  // int64 sums (FBGEMM sums in int32, the same below 2**31).
  at::Tensor w_scale, w_zero;
  if (per_channel) {
    w_scale = weight.q_per_channel_scales().to(at::kFloat);
    w_zero = weight.q_per_channel_zero_points().to(at::kLong).unsqueeze(1);
  } else {
    w_scale = at::full({n}, static_cast<float>(weight.q_scale()));
    w_zero = at::scalar_tensor(weight.q_zero_point(), at::kLong);
  }
  const at::Tensor wi =
      weight.int_repr().to(at::kLong).sub(w_zero).to(input.device());
  const at::Tensor acc = at::mm(xi, wi.t()).contiguous();
  // 3. The multiplier of column j is float(x_scale) * float(w_scale[j]), a
  // float32 product, as FBGEMM precomputes it.
  const at::Tensor scale =
      w_scale.mul(static_cast<float>(xq.q_scale())).to(input.device());
  const at::Tensor b = bias.has_value()
      ? bias->to(input.device(), at::kFloat).contiguous()
      : at::zeros({n}, input.options());
  at::Tensor out = at::empty({x.size(0), n}, input.options());
  requantize(acc, scale, b, out, relu);
  std::vector<int64_t> sizes(input.sizes().begin(), input.sizes().end() - 1);
  sizes.push_back(n);
  torch::jit::drop(*stack, 3);
  torch::jit::push(*stack, out.view(sizes));
}

} // namespace ember

// The input is a plain float tensor: the kernel is at PrivateUse1, where the
// CPU's is at CPU. Without it, the CPU fallback ran the CPU's kernel on a
// copy of the input.
TORCH_LIBRARY_IMPL(quantized, PrivateUse1, m) {
  m.impl("linear_dynamic",
         torch::CppFunction::makeFromBoxedFunction<&ember::linearDynamic>());
  m.impl("linear_relu_dynamic",
         torch::CppFunction::makeFromBoxedFunction<&ember::linearDynamic>());
}
// ember-book: end quantized_linear
