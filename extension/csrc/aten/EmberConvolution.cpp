// 2-D convolution on ember, forward and backward: im2col plus the gemm loops
// of EmberBlas.h, reached through convolution_overrideable and
// convolution_backward_overrideable.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include "aten/EmberBlas.h"
#include "aten/EmberHostKernels.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin conv_shape
namespace ember::conv {

// The geometry of one 2-D convolution, NCHW. The channels split into
// `groups` independent convolutions; each image and group ("unit") is one
// matrix product: out[oc][p] = sum over q of weight[oc][q] * cols[q][p],
// where row q = (c, ky, kx) of cols (im2col) holds, for every output
// position p, the input value that kernel tap sees from there.
struct Shape {
  int64_t batch, channels, height, width;
  int64_t out_channels, kernel_h, kernel_w, out_h, out_w;
  int64_t stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w, groups;

  int64_t groupChannels() const { return channels / groups; }
  int64_t groupOutChannels() const { return out_channels / groups; }
  int64_t patch() const { return groupChannels() * kernel_h * kernel_w; }
  int64_t positions() const { return out_h * out_w; }
  int64_t units() const { return batch * groups; }
};

int64_t pick(c10::SymIntArrayRef values, size_t i) {
  return (values.size() == 1 ? values[0] : values.at(i)).expect_int();
}

Shape shapeOf(const char* op, const at::Tensor& input, const at::Tensor& weight,
              c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
              c10::SymIntArrayRef dilation, int64_t groups) {
  TORCH_CHECK(input.dim() == 4 && weight.dim() == 4, "ember: ", op, " on ",
              input.device(), " supports 2-D convolutions (4-D input and "
              "weight), got ", input.dim(), "-D input and ", weight.dim(),
              "-D weight");
  TORCH_CHECK(input.device() == weight.device() && input.is_privateuseone(),
              "ember: ", op, " expects input and weight on one ember device, "
              "got ", input.device(), " and ", weight.device());
  const at::ScalarType dtype = input.scalar_type();
  TORCH_CHECK(dtype == weight.scalar_type() &&
                  (dtype == at::kFloat || dtype == at::kDouble),
              "ember: ", op, " on ", input.device(), " supports float32 and "
              "float64 (input and weight alike), got ", dtype, " and ",
              weight.scalar_type());
  Shape s{input.size(0), input.size(1), input.size(2), input.size(3),
          weight.size(0), weight.size(2), weight.size(3), 0, 0,
          pick(stride, 0), pick(stride, 1), pick(padding, 0), pick(padding, 1),
          pick(dilation, 0), pick(dilation, 1), groups};
  TORCH_CHECK(groups > 0 && s.channels % groups == 0 &&
                  s.out_channels % groups == 0 &&
                  weight.size(1) == s.groupChannels(),
              "ember: ", op, " on ", input.device(), ": weight ",
              weight.sizes(), " does not fit input ", input.sizes(),
              " with groups=", groups);
  s.out_h = (s.height + 2 * s.pad_h - s.dilation_h * (s.kernel_h - 1) - 1) /
          s.stride_h + 1;
  s.out_w = (s.width + 2 * s.pad_w - s.dilation_w * (s.kernel_w - 1) - 1) /
          s.stride_w + 1;
  TORCH_CHECK(s.out_h > 0 && s.out_w > 0, "ember: ", op, " on ",
              input.device(), ": the kernel does not fit the padded input");
  return s;
}

} // namespace ember::conv
// ember-book: end conv_shape

// ember-book: begin conv_loops
namespace ember::conv {

// The per-element loops, -O3 like the gemm's (see EmberBlas.h).
#pragma GCC push_options
#pragma GCC optimize("O3")

// Calls visit(row of cols, index in the image plane or -1 for padding)
// for every (tap, output position) of one input channel.
template <typename Visit>
void forEachTap(const Shape& s, int64_t y_stride, int64_t x_stride,
                const Visit& visit) {
  const int64_t positions = s.out_h * s.out_w;
  for (int64_t ky = 0; ky < s.kernel_h; ++ky) {
    for (int64_t kx = 0; kx < s.kernel_w; ++kx) {
      const int64_t row = ky * s.kernel_w + kx;
      for (int64_t oy = 0; oy < s.out_h; ++oy) {
        const int64_t y = oy * s.stride_h - s.pad_h + ky * s.dilation_h;
        for (int64_t ox = 0; ox < s.out_w; ++ox) {
          const int64_t x = ox * s.stride_w - s.pad_w + kx * s.dilation_w;
          const bool inside = y >= 0 && y < s.height && x >= 0 && x < s.width;
          visit(row * positions + oy * s.out_w + ox,
                inside ? y * y_stride + x * x_stride : -1);
        }
      }
    }
  }
}

// Unit (n, g) of `input` (any strides) into cols[patch][positions].
template <typename T>
void im2col(const Shape& s, const T* input, c10::IntArrayRef strides,
            int64_t n, int64_t g, T* cols) {
  const int64_t taps = s.kernel_h * s.kernel_w * s.positions();
  for (int64_t c = 0; c < s.groupChannels(); ++c) {
    const int64_t channel = g * s.groupChannels() + c;
    const T* plane = input + n * strides[0] + channel * strides[1];
    T* rows = cols + c * taps;
    forEachTap(s, strides[2], strides[3], [&](int64_t at, int64_t from) {
      rows[at] = from < 0 ? T(0) : plane[from];
    });
  }
}

// The reverse, for the input gradient: add cols into unit (n, g) of a
// contiguous image the caller zeroed. Overlapping patches add up.
template <typename T>
void col2im(const Shape& s, const T* cols, int64_t n, int64_t g, T* image) {
  const int64_t taps = s.kernel_h * s.kernel_w * s.positions();
  for (int64_t c = 0; c < s.groupChannels(); ++c) {
    const int64_t channel = n * s.channels + g * s.groupChannels() + c;
    T* plane = image + channel * s.height * s.width;
    const T* rows = cols + c * taps;
    forEachTap(s, s.width, 1, [&](int64_t at, int64_t to) {
      if (to >= 0) {
        plane[to] += rows[at];
      }
    });
  }
}

// grad_bias[oc] = grad_out summed over the images and positions.
template <typename T>
void biasGradient(const Shape& s, const T* grad_out, T* grad_bias) {
  const int64_t positions = s.out_h * s.out_w;
  at::parallel_for(0, s.out_channels, 1, [&](int64_t begin, int64_t end) {
    for (int64_t oc = begin; oc < end; ++oc) {
      T sum = 0;
      for (int64_t n = 0; n < s.batch; ++n) {
        const T* row = grad_out + (n * s.out_channels + oc) * positions;
        for (int64_t p = 0; p < positions; ++p) {
          sum += row[p];
        }
      }
      grad_bias[oc] = sum;
    }
  });
}

template <typename T>
void fillZero(T* data, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    data[i] = T(0);
  }
}

#pragma GCC pop_options

} // namespace ember::conv
// ember-book: end conv_loops

// ember-book: begin conv_forward
namespace ember::conv {

// Forward: out[n, oc] = bias[oc] + the unit's product. One launch; inside
// it, the units are split over the threads (each with its own cols).
at::Tensor forward(const char* op, const at::Tensor& input,
                   const at::Tensor& weight_any,
                   const std::optional<at::Tensor>& bias,
                   const Shape& s) {
  const at::Tensor weight = weight_any.contiguous(); // (out_channels, patch)
  const bool has_bias = bias.has_value() && bias->defined();
  if (has_bias) {
    TORCH_CHECK(bias->device() == input.device() &&
                    bias->scalar_type() == input.scalar_type() &&
                    bias->dim() == 1 && bias->size(0) == s.out_channels,
                "ember: ", op, " on ", input.device(), " expects a bias of ",
                s.out_channels, " elements like the input, got ",
                bias->sizes(), " ", bias->scalar_type(), " on ",
                bias->device());
  }
  const c10::DeviceGuard guard(input.device());
  at::Tensor out = at::empty({s.batch, s.out_channels, s.out_h, s.out_w},
                             input.options());
  if (out.numel() == 0) {
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "ember_conv", [&] {
    using T = scalar_t;
    const T* in = input.const_data_ptr<T>();
    const T* w = weight.const_data_ptr<T>();
    const T* b = has_bias ? bias->const_data_ptr<T>() : nullptr;
    T* o = out.mutable_data_ptr<T>();
    const int64_t b_stride = has_bias ? bias->stride(0) : 0;
    // Owned: a graph replays the kernel after input's sizes may be gone.
    const at::DimVector strides(input.strides());
    const int64_t oc_g = s.groupOutChannels();
    launchRecorded({in, w, b, o}, [=](ptrdiff_t offset) {
      const T* kin = atOffset(in, offset);
      const T* kw = atOffset(w, offset);
      const T* kb = atOffset(b, offset);
      T* ko = atOffset(o, offset);
      at::parallel_for(0, s.units(), 1, [&](int64_t begin, int64_t end) {
        std::vector<T> cols(s.patch() * s.positions());
        for (int64_t unit = begin; unit < end; ++unit) {
          const int64_t n = unit / s.groups, first = unit % s.groups * oc_g;
          im2col(s, kin, strides, n, unit % s.groups, cols.data());
          blas::Gemm<T> p{
              .m = oc_g, .n = s.positions(), .k = s.patch(),
              .a = {kw + first * s.patch(), 0, s.patch(), 1},
              .b = {cols.data(), 0, s.positions(), 1},
              .c = {ko + (n * s.out_channels + first) * s.positions(), 0,
                    s.positions(), 1}};
          if (kb != nullptr) { // bias[oc] along row oc: column stride 0
            p.s = {kb + first * b_stride, 0, b_stride, 0};
            p.beta = T(1);
          }
          blas::gemm(p);
        }
      });
    });
  });
  return out;
}

} // namespace ember::conv
// ember-book: end conv_forward

// ember-book: begin conv_backward
namespace ember::conv {

// Backward, as output_mask asks: input gradient (per unit: weight_g^T @
// grad_out, then col2im), weight gradient (per group: grad_out @ cols^T,
// summed over the images), bias gradient (grad_out summed). One launch.
std::tuple<at::Tensor, at::Tensor, at::Tensor> backward(
    const char* op, const at::Tensor& grad_output_any, const at::Tensor& input,
    const at::Tensor& weight_any, const Shape& s, std::array<bool, 3> mask) {
  TORCH_CHECK(grad_output_any.device() == input.device() &&
                  grad_output_any.scalar_type() == input.scalar_type(),
              "ember: ", op, " expects grad_output on ", input.device(),
              " with dtype ", input.scalar_type(), ", got ",
              grad_output_any.device(), " ", grad_output_any.scalar_type());
  // Often an expanded tensor (stride 0, from sum()): the products want rows.
  const at::Tensor grad_output = grad_output_any.contiguous();
  const at::Tensor weight = weight_any.contiguous();
  const c10::DeviceGuard guard(input.device());
  at::Tensor grad_input, grad_weight, grad_bias;
  if (mask[0]) grad_input = at::empty(input.sizes(), input.options());
  if (mask[1]) grad_weight = at::empty(weight.sizes(), weight.options());
  if (mask[2]) grad_bias = at::empty({s.out_channels}, input.options());
  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "ember_conv_backward", [&] {
    using T = scalar_t;
    const T* go = grad_output.const_data_ptr<T>();
    const T* in = input.const_data_ptr<T>();
    const T* w = weight.const_data_ptr<T>();
    T* gi = mask[0] ? grad_input.mutable_data_ptr<T>() : nullptr;
    T* gw = mask[1] ? grad_weight.mutable_data_ptr<T>() : nullptr;
    T* gb = mask[2] ? grad_bias.mutable_data_ptr<T>() : nullptr;
    // Owned: a graph replays the kernel after input's sizes may be gone.
    const at::DimVector strides(input.strides());
    const int64_t oc_g = s.groupOutChannels();
    const int64_t cols_size = s.patch() * s.positions();
    const int64_t image_size = input.numel();
    launchRecorded({go, in, w, gi, gw, gb}, [=](ptrdiff_t offset) {
      const T* kgo = atOffset(go, offset);
      const T* kin = atOffset(in, offset);
      const T* kw = atOffset(w, offset);
      // grad_out of unit (n, g) as an (oc_g, positions) matrix.
      const auto grad_out = [&](int64_t n, int64_t g) {
        return kgo + (n * s.out_channels + g * oc_g) * s.positions();
      };
      if (T* kgi = atOffset(gi, offset)) {
        fillZero(kgi, image_size);
        at::parallel_for(0, s.units(), 1, [&](int64_t begin, int64_t end) {
          std::vector<T> cols(cols_size);
          for (int64_t unit = begin; unit < end; ++unit) {
            const int64_t n = unit / s.groups, g = unit % s.groups;
            blas::gemm(blas::Gemm<T>{
                .m = s.patch(), .n = s.positions(), .k = oc_g,
                .a = {kw + g * oc_g * s.patch(), 0, 1, s.patch()}, // w^T
                .b = {grad_out(n, g), 0, s.positions(), 1},
                .c = {cols.data(), 0, s.positions(), 1}});
            col2im(s, cols.data(), n, g, kgi);
          }
        });
      }
      if (T* kgw = atOffset(gw, offset)) {
        std::vector<T> cols(cols_size);
        for (int64_t g = 0; g < s.groups; ++g) {
          T* grad_w = kgw + g * oc_g * s.patch();
          for (int64_t n = 0; n < s.batch; ++n) {
            im2col(s, kin, strides, n, g, cols.data());
            blas::Gemm<T> p{
                .m = oc_g, .n = s.patch(), .k = s.positions(),
                .a = {grad_out(n, g), 0, s.positions(), 1},
                .b = {cols.data(), 0, 1, s.positions()}, // cols^T
                .c = {grad_w, 0, s.patch(), 1}};
            if (n > 0) { // accumulate over the images: C = 1 * C + A @ B
              p.s = {grad_w, 0, s.patch(), 1};
              p.beta = T(1);
            }
            blas::gemm(p); // its rows split over the threads
          }
        }
      }
      if (T* kgb = atOffset(gb, offset)) {
        biasGradient(s, kgo, kgb);
      }
    });
  });
  return {grad_input, grad_weight, grad_bias};
}

} // namespace ember::conv
// ember-book: end conv_backward

// ember-book: begin convolution
namespace ember::conv {

// conv1d/2d/3d, Conv2d, F.conv2d with padding="same", ... all end in
// aten::convolution, whose autograd kernel records ConvolutionBackward0 and
// whose default kernel (_convolution) checks the arguments, turns 1-D into
// 2-D and, for a device it does not know, calls this operator.
//
// Since chapter 14 it runs the host's convolution library, ATen's CPU
// convolution (oneDNN where the build has it and ATen picks it), on the
// device's memory, the way a GPU backend calls cuDNN: several times faster
// than chapter 06's im2col kernels, and every case they refused (transposed,
// 1-D and 3-D, integer and complex dtypes) works.
//
// Its results are contiguous whatever the layout of input and weight
// (chapter 18): FakeTensor, which torch.compile plans with, asks ATen which
// convolution backend a device gets and which layout that backend returns
// (`_conv_determine_backend_memory_format`), and for a backend outside
// PyTorch (ConvBackend::Overrideable) the answer is contiguous. The host
// library returns channels-last for channels-last operands, so ember copies
// then; a device cannot give FakeTensor another rule without replacing its
// convolution rule for every device.
at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  return at::native::call_fallback_fn_symint<
             &hostKernel, at::_ops::convolution>::call(input, weight, bias,
                                                       stride, padding,
                                                       dilation, transposed,
                                                       output_padding, groups)
      .contiguous();
}

// ConvolutionBackward0 calls aten::convolution_backward, whose default
// kernel calls this one for ember tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor>
convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  // The bias gradient's shape: one value per output channel (a transposed
  // weight holds them in dimension 1, per group).
  const std::array<c10::SymInt, 1> bias_sizes{
      transposed ? weight.sym_size(1) * groups : weight.sym_size(0)};
  using Host = at::native::call_fallback_fn_symint<
      &hostKernel, at::_ops::convolution_backward>;
  auto [grad_input, grad_weight, grad_bias] =
      Host::call(grad_output, input, weight, bias_sizes, stride, padding,
                 dilation, transposed, output_padding, groups, output_mask);
  // Contiguous too: FakeTensor gives both gradients the forward's layout.
  const auto dense = [](const at::Tensor& t) {
    return t.defined() ? t.contiguous() : t;
  };
  return {dense(grad_input), dense(grad_weight), grad_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable",
         TORCH_FN(convolution_backward_overrideable));
}

} // namespace ember::conv
// ember-book: end convolution
