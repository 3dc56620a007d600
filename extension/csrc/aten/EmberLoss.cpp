// cross_entropy's pieces on ember: (log_)softmax and the negative
// log-likelihood loss, forward and backward. ATen's CPU kernels run inside an
// ember launch on the device's memory (EmberHostKernels.h).
#include <ATen/core/Tensor.h>
#include <ATen/ops/_log_softmax.h>
#include <ATen/ops/_log_softmax_backward_data.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/_softmax_backward_data.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/nll_loss_backward.h>
#include <ATen/ops/nll_loss_forward.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

#include "aten/EmberHostKernels.h"
#include "aten/EmberHostOwned.h"

// ember-book: begin softmax
namespace ember {

using at::Tensor;

// softmax and log_softmax along `dim`: the result has the input's shape
// (float32 for a float16 input with half_to_float, which only CUDA supports:
// the CPU kernel refuses it, and so does ember).
template <auto kernel>
Tensor softmaxForward(const char* op, const Tensor& self, int64_t dim,
                      bool half_to_float) {
  const c10::DeviceGuard guard(self.device());
  const at::ScalarType dtype = half_to_float ? at::kFloat : self.scalar_type();
  Tensor out = at::empty(self.sizes(), self.options().dtype(dtype));
  onHostOwned(op, self.device(), {&self, &out}, [=](const HostView& host) {
    Tensor h_out = host(out);
    kernel(host(self), dim, half_to_float, h_out);
  });
  return out;
}

// The gradient needs only the forward's result (softmax: y * (g - sum(g * y));
// log_softmax: g - exp(y) * sum(g)) and comes out in the input's dtype.
template <auto kernel>
Tensor softmaxBackward(const char* op, const Tensor& grad_output,
                       const Tensor& output, int64_t dim,
                       at::ScalarType input_dtype) {
  TORCH_CHECK(grad_output.sizes() == output.sizes(), "ember: ", op, " on ",
              output.device(), " expects grad_output of the output's shape ",
              output.sizes(), ", got ", grad_output.sizes());
  const c10::DeviceGuard guard(output.device());
  Tensor grad_input = at::empty(output.sizes(), output.options().dtype(input_dtype));
  onHostOwned(op, output.device(), {&grad_output, &output, &grad_input},
         [=](const HostView& host) {
           Tensor h_grad_input = host(grad_input);
           kernel(host(grad_output), host(output), dim, input_dtype, h_grad_input);
         });
  return grad_input;
}

Tensor log_softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return softmaxForward<&at::_log_softmax_outf>("aten::_log_softmax", self,
                                                dim, half_to_float);
}
Tensor softmax(const Tensor& self, int64_t dim, bool half_to_float) {
  return softmaxForward<&at::_softmax_outf>("aten::_softmax", self, dim,
                                            half_to_float);
}
Tensor log_softmax_backward(const Tensor& grad_output, const Tensor& output,
                            int64_t dim, at::ScalarType input_dtype) {
  return softmaxBackward<&at::_log_softmax_backward_data_outf>(
      "aten::_log_softmax_backward_data", grad_output, output, dim, input_dtype);
}
Tensor softmax_backward(const Tensor& grad_output, const Tensor& output,
                        int64_t dim, at::ScalarType input_dtype) {
  return softmaxBackward<&at::_softmax_backward_data_outf>(
      "aten::_softmax_backward_data", grad_output, output, dim, input_dtype);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_log_softmax", TORCH_FN(log_softmax));
  m.impl("_softmax", TORCH_FN(softmax));
  m.impl("_log_softmax_backward_data", TORCH_FN(log_softmax_backward));
  m.impl("_softmax_backward_data", TORCH_FN(softmax_backward));
}

} // namespace ember
// ember-book: end softmax

// ember-book: begin nll_loss
namespace ember {

using at::Tensor;
using OptionalTensor = std::optional<Tensor>;

// cross_entropy(x, y) is nll_loss(log_softmax(x), y): the loss is minus the
// log-probability of each sample's target class, weighted, then (reduction)
// kept per sample (0), summed (2) or averaged over the weights (1). The
// total weight is returned for the backward.
std::tuple<Tensor, Tensor> nll_loss_forward(const Tensor& self,
                                            const Tensor& target,
                                            const OptionalTensor& weight,
                                            int64_t reduction,
                                            int64_t ignore_index) {
  constexpr const char* op = "aten::nll_loss_forward";
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "ember: ", op, " on ",
              self.device(), " expects 1-D or 2-D log-probabilities, got ",
              self.dim(), "-D");
  // PyTorch's words first, as its generated device checks say them.
  TORCH_CHECK(target.device() == self.device(), "Expected all tensors to be ",
              "on the same device, but found at least two devices, ",
              self.device(), " and ", target.device(), "! (ember: ", op,
              " expects the target on ", self.device(), ", got it on ",
              target.device(), ")");
  const c10::DeviceGuard guard(self.device());
  const bool per_sample = reduction == 0 && self.dim() == 2; // Reduction::None
  Tensor output = per_sample ? at::empty({self.size(0)}, self.options())
                             : at::empty({}, self.options());
  Tensor total_weight = at::empty({}, self.options());
  onHostOwned(op, self.device(),
         {&self, &target, &orUndefined(weight), &output, &total_weight},
         [=](const HostView& host) {
           Tensor h_output = host(output), h_total = host(total_weight);
           at::nll_loss_forward_outf(host(self), host(target), host(weight),
                                     reduction, ignore_index, h_output, h_total);
         });
  return {output, total_weight};
}

// The gradient is zero except at each sample's target class.
Tensor nll_loss_backward(const Tensor& grad_output, const Tensor& self,
                         const Tensor& target, const OptionalTensor& weight,
                         int64_t reduction, int64_t ignore_index,
                         const Tensor& total_weight) {
  constexpr const char* op = "aten::nll_loss_backward";
  const c10::DeviceGuard guard(self.device());
  Tensor grad_input = at::empty(self.sizes(), self.options());
  onHostOwned(op, self.device(),
         {&grad_output, &self, &target, &orUndefined(weight), &total_weight,
          &grad_input},
         [=](const HostView& host) {
           Tensor h_grad_input = host(grad_input);
           at::nll_loss_backward_outf(host(grad_output), host(self),
                                      host(target), host(weight), reduction,
                                      ignore_index, host(total_weight),
                                      h_grad_input);
         });
  return grad_input;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward));
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward));
}

} // namespace ember
// ember-book: end nll_loss
