// 2-D max pooling on ember, forward and backward: ATen's CPU kernels run
// inside an ember launch on the device's memory (EmberHostKernels.h).
// Average pooling needs nothing here: AdaptiveAvgPool2d(1) is a mean.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/max_pool2d_with_indices.h>
#include <ATen/ops/max_pool2d_with_indices_backward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <tuple>

#include "aten/EmberHostKernels.h"
#include "aten/EmberHostOwned.h"

// ember-book: begin max_pool2d
namespace ember {

using at::IntArrayRef;
using at::Tensor;

// One spatial dimension of a pooling window: the list holds one value for
// both dimensions or one per dimension; an empty stride means "the kernel".
int64_t poolArg(IntArrayRef values, size_t i, int64_t fallback) {
  if (values.empty()) {
    return fallback;
  }
  return values.size() == 1 ? values[0] : values.at(i);
}

// The output length of one dimension, as ATen's pooling computes it: with
// ceil_mode a last, partial window counts if it starts inside the input or
// the left padding.
int64_t pooledSize(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                   int64_t dilation, bool ceil_mode) {
  const int64_t span = in + 2 * pad - dilation * (kernel - 1) - 1 +
                       (ceil_mode ? stride - 1 : 0);
  int64_t out = (span >= 0 ? span / stride : -((-span + stride - 1) / stride)) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) {
    --out;
  }
  return out;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(
    const Tensor& self, IntArrayRef kernel_size, IntArrayRef stride,
    IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  constexpr const char* op = "aten::max_pool2d_with_indices";
  TORCH_CHECK((self.dim() == 3 || self.dim() == 4) && !kernel_size.empty() &&
                  kernel_size.size() <= 2,
              "ember: ", op, " on ", self.device(), " expects a 3-D or 4-D "
              "input and one or two kernel sizes, got ", self.dim(),
              "-D and kernel_size=", kernel_size);
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  for (size_t i = 0; i < 2; ++i) {
    const int64_t k = poolArg(kernel_size, i, 1);
    const int64_t s = poolArg(stride, i, k);
    TORCH_CHECK(k > 0 && s > 0 && poolArg(dilation, i, 1) > 0, "ember: ", op,
                " on ", self.device(), ": kernel size, stride and dilation "
                "must be positive, got ", kernel_size, ", ", stride, ", ",
                dilation);
    int64_t& size = shape[shape.size() - 2 + i];
    size = pooledSize(size, k, s, poolArg(padding, i, 0),
                      poolArg(dilation, i, 1), ceil_mode);
    TORCH_CHECK(size > 0, "ember: ", op, " on ", self.device(), ": the ",
                "window does not fit the input ", self.sizes());
  }
  const c10::DeviceGuard guard(self.device());
  const auto layout = self.options().memory_format(self.suggest_memory_format());
  Tensor out = at::empty(shape, layout);
  Tensor indices = at::empty(shape, layout.dtype(at::kLong));
  // Owned copies of the lists: a graph's replay runs after the call is gone.
  const at::DimVector ks(kernel_size), st(stride), pad(padding), dil(dilation);
  onHostOwned(op, self.device(), {&self, &out, &indices}, [=](const HostView& host) {
    Tensor h_out = host(out), h_indices = host(indices);
    at::max_pool2d_with_indices_outf(host(self), ks, st, pad, dil, ceil_mode,
                                     h_out, h_indices);
  });
  return {out, indices};
}

// Each output's gradient goes to the input element its index names.
Tensor max_pool2d_with_indices_backward(
    const Tensor& grad_output, const Tensor& self, IntArrayRef kernel_size,
    IntArrayRef stride, IntArrayRef padding, IntArrayRef dilation,
    bool ceil_mode, const Tensor& indices) {
  constexpr const char* op = "aten::max_pool2d_with_indices_backward";
  TORCH_CHECK(grad_output.sizes() == indices.sizes(), "ember: ", op, " on ",
              self.device(), " expects grad_output of the indices' shape ",
              indices.sizes(), ", got ", grad_output.sizes());
  const c10::DeviceGuard guard(self.device());
  Tensor grad_input = at::empty(
      self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  const at::DimVector ks(kernel_size), st(stride), pad(padding), dil(dilation);
  onHostOwned(op, self.device(), {&grad_output, &self, &indices, &grad_input},
         [=](const HostView& host) {
           Tensor h_grad_input = host(grad_input);
           at::max_pool2d_with_indices_backward_outf(
               host(grad_output), host(self), ks, st, pad, dil, ceil_mode,
               host(indices), h_grad_input);
         });
  return grad_input;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d_with_indices));
  m.impl("max_pool2d_with_indices_backward",
         TORCH_FN(max_pool2d_with_indices_backward));
}

} // namespace ember
// ember-book: end max_pool2d
