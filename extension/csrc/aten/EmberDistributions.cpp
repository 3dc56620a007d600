// Distributions the conformance sweep (chapter 12) found without an ember
// kernel: cauchy_, log_normal_, geometric_, normal with tensor arguments and
// rrelu's noise. The CPU fallback refuses random operators (chapter 08: the
// CPU's generator would draw them), so each failed on ember. Each is built
// here from chapter 08's draws (uniform_, normal_) and elementwise ember ops,
// so ember's generator and seed govern every number.
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/native/Resize.h>
#include <c10/core/Scalar.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <optional>
#include <utility>

// ember-book: begin distributions
namespace ember {

// Chapter 08's kernels draw Float and Double. Other dtypes (BFloat16, or the
// integers geometric_ fills) draw in Float and convert, as the CPU does for
// reduced-precision dtypes.
at::Tensor drawBuffer(const at::Tensor& self) {
  const at::ScalarType work =
      self.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return at::empty(self.sizes(), self.options().dtype(work));
}

// The dtypes a random operator fills, as on the CPU; any other is refused
// there, and here too: drawing floats into an int32 tensor's uniform_ would
// truncate them to zeros without a word.
void checkFillable(const char* op, const at::Tensor& self, bool integers,
                   bool complex) {
  const at::ScalarType type = self.scalar_type();
  const bool ok = at::isFloatingType(type) ||
      (complex && at::isComplexType(type)) ||
      (integers && at::isIntegralType(type, /*includeBool=*/true));
  TORCH_CHECK_NOT_IMPLEMENTED(ok, "ember: ", op, " is not implemented for ",
                              type, " tensors (on ", self.device(),
                              ", as on the CPU)");
}

at::Tensor& cauchy_(at::Tensor& self, double median, double sigma,
                    std::optional<at::Generator> generator) {
  checkFillable("aten::cauchy_", self, /*integers=*/false, /*complex=*/false);
  TORCH_CHECK(sigma > 0.0, "ember: aten::cauchy_ expects sigma > 0.0, got ",
              sigma);
  // Inversion: median + sigma * tan(pi * (u - 1/2)) for u uniform in [0, 1).
  at::Tensor u = drawBuffer(self).uniform_(0.0, 1.0, generator);
  u.sub_(0.5).mul_(M_PI).tan_().mul_(sigma).add_(median);
  return self.copy_(u);
}

at::Tensor& logNormal_(at::Tensor& self, double mean, double std,
                       std::optional<at::Generator> generator) {
  checkFillable("aten::log_normal_", self, /*integers=*/false,
                /*complex=*/false);
  TORCH_CHECK(std > 0.0, "ember: aten::log_normal_ expects std > 0.0, got ",
              std);
  at::Tensor x = drawBuffer(self).normal_(mean, std, generator);
  return self.copy_(x.exp_());
}

at::Tensor& geometric_(at::Tensor& self, double p,
                       std::optional<at::Generator> generator) {
  checkFillable("aten::geometric_", self,
                /*integers=*/self.scalar_type() != at::kBool,
                /*complex=*/false);
  TORCH_CHECK(p > 0.0 && p < 1.0, "ember: aten::geometric_ expects p in ",
              "(0, 1), got ", p);
  // The number of trials up to the first success: ceil(log(v) / log(1 - p))
  // for v = 1 - u in (0, 1]; at least 1 (v = 1 gives 0).
  at::Tensor v = at::rsub(drawBuffer(self).uniform_(0.0, 1.0, generator), 1);
  v.log_().div_(std::log1p(-p)).ceil_().clamp_min_(1);
  return self.copy_(v);
}

// normal(mean, std) with a tensor for either: a standard normal draw in the
// result's shape, scaled and shifted elementwise (broadcasting).
at::Tensor& normalInto(at::Tensor& out, const at::Tensor& mean,
                       const at::Tensor& std,
                       std::optional<at::Generator> generator) {
  TORCH_CHECK(!std.is_complex(), "ember: aten::normal expects a real std");
  TORCH_CHECK(std.numel() == 0 || std.min().ge(0).item<bool>(),
              "ember: aten::normal expects all elements of std >= 0.0");
  at::Tensor draw = drawBuffer(out).normal_(0.0, 1.0, generator);
  return out.copy_(draw.mul_(std).add_(mean));
}

at::Tensor normalTensorTensor(const at::Tensor& mean, const at::Tensor& std,
                              std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(at::infer_size(mean.sizes(), std.sizes()),
                             mean.options());
  return normalInto(out, mean, std, generator);
}

at::Tensor normalTensorFloat(const at::Tensor& mean, double std,
                             std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(mean.sizes(), mean.options());
  return normalInto(out, mean, at::scalar_tensor(std, mean.options()),
                    generator);
}

at::Tensor normalFloatTensor(double mean, const at::Tensor& std,
                             std::optional<at::Generator> generator) {
  at::Tensor out = at::empty(std.sizes(), std.options());
  return normalInto(out, at::scalar_tensor(mean, std.options()), std,
                    generator);
}

// rrelu in training: a negative input x gives r * x with r uniform in
// [lower, upper], and `noise` records r (1 where x > 0) for the backward.
// In evaluation the slope is the mean, (lower + upper) / 2: a leaky relu.
at::Tensor rreluWithNoise(const at::Tensor& self, at::Tensor& noise,
                          const at::Scalar& lower, const at::Scalar& upper,
                          bool training,
                          std::optional<at::Generator> generator) {
  if (!training) {
    return at::leaky_relu(self, (lower.toDouble() + upper.toDouble()) / 2);
  }
  at::Tensor r = drawBuffer(self).uniform_(lower.toDouble(),
                                           upper.toDouble(), generator);
  noise.resize_as_(self);
  noise.copy_(at::where(self.le(0), r, at::ones_like(r)));
  return at::mul(self, noise);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("cauchy_", &cauchy_);
  m.impl("log_normal_", &logNormal_);
  m.impl("geometric_", &geometric_);
  m.impl("normal.Tensor_Tensor", &normalTensorTensor);
  m.impl("normal.Tensor_float", &normalTensorFloat);
  m.impl("normal.float_Tensor", &normalFloatTensor);
  m.impl("rrelu_with_noise", &rreluWithNoise);
}

} // namespace ember
// ember-book: end distributions

// ember-book: begin random_dtypes
namespace ember {

// Chapter 08's random kernels (EmberRandom.cpp), compiled for Float and
// Double (random_ also for Long). Declared here: this part wraps them.
at::Tensor& uniform_(at::Tensor& self, double from, double to,
                     std::optional<at::Generator> generator);
at::Tensor& normal_(at::Tensor& self, double mean, double std,
                    std::optional<at::Generator> generator);
at::Tensor& exponential_(at::Tensor& self, double lambd,
                         std::optional<at::Generator> generator);
at::Tensor& bernoulliScalar_(at::Tensor& self, double p,
                             std::optional<at::Generator> generator);
at::Tensor& bernoulliTensor_(at::Tensor& self, const at::Tensor& p,
                             std::optional<at::Generator> generator);
at::Tensor& randomFrom_(at::Tensor& self, int64_t from,
                        std::optional<int64_t> to,
                        std::optional<at::Generator> generator);
std::pair<int64_t, uint64_t> integerRange(const at::Tensor& self,
                                          int64_t from,
                                          std::optional<int64_t> to);
at::Tensor& randomRange(const char* op, at::Tensor& self, int64_t from,
                        uint64_t range, std::optional<at::Generator> generator);
at::Tensor& multinomialOut(const at::Tensor& self, int64_t samples,
                           bool replacement,
                           std::optional<at::Generator> generator,
                           at::Tensor& out);
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train);
at::Tensor nativeDropoutBackward(const at::Tensor& grad,
                                 const at::Tensor& mask, double scale);

bool drawsDirectly(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble;
}

// A draw into a dtype the kernels lack goes through a tensor they have:
// a complex tensor's real view (each part drawn like a real, as the CPU
// does), or for bfloat16, float16 and the rest a float32 buffer, converted
// into self by copy_. The same Philox numbers, the same generator offset.
template <typename Draw>
at::Tensor& drawVia(at::Tensor& self, Draw&& draw) {
  if (self.numel() == 0) {
    return self; // nothing to draw, whatever the dtype
  }
  if (drawsDirectly(self)) {
    return draw(self);
  }
  if (self.is_complex()) {
    // complex32's parts are float16: they go through a float32 buffer too.
    at::Tensor parts = at::view_as_real(self);
    drawVia(parts, draw);
    return self;
  }
  at::Tensor buffer = at::empty(self.sizes(), self.options().dtype(at::kFloat));
  draw(buffer);
  return self.copy_(buffer);
}

at::Tensor& uniformAnyDtype_(at::Tensor& self, double from, double to,
                             std::optional<at::Generator> generator) {
  checkFillable("aten::uniform_", self, /*integers=*/false, /*complex=*/true);
  return drawVia(self, [&](at::Tensor& t) -> at::Tensor& {
    return uniform_(t, from, to, generator);
  });
}

at::Tensor& normalAnyDtype_(at::Tensor& self, double mean, double std,
                            std::optional<at::Generator> generator) {
  checkFillable("aten::normal_", self, /*integers=*/false, /*complex=*/true);
  // A complex normal's variance is split between its two parts.
  const double part_std = self.is_complex() ? std / std::sqrt(2.0) : std;
  return drawVia(self, [&](at::Tensor& t) -> at::Tensor& {
    return normal_(t, mean, part_std, generator);
  });
}

at::Tensor& exponentialAnyDtype_(at::Tensor& self, double lambd,
                                 std::optional<at::Generator> generator) {
  checkFillable("aten::exponential_", self, /*integers=*/false,
                /*complex=*/false);
  return drawVia(self, [&](at::Tensor& t) -> at::Tensor& {
    return exponential_(t, lambd, generator);
  });
}

at::Tensor& bernoulliScalarAnyDtype_(at::Tensor& self, double p,
                                     std::optional<at::Generator> generator) {
  checkFillable("aten::bernoulli_", self, /*integers=*/true, /*complex=*/false);
  return drawVia(self, [&](at::Tensor& t) -> at::Tensor& {
    return bernoulliScalar_(t, p, generator);
  });
}

at::Tensor& bernoulliTensorAnyDtype_(at::Tensor& self, const at::Tensor& p,
                                     std::optional<at::Generator> generator) {
  checkFillable("aten::bernoulli_", self, /*integers=*/true, /*complex=*/false);
  return drawVia(self, [&](at::Tensor& t) -> at::Tensor& {
    return bernoulliTensor_(t, p, generator);
  });
}

// Integers: drawn as Long, then converted. The range follows the rules of
// self's dtype (integerRange, chapter 08): without `to` it ends at the
// largest integer the dtype holds exactly, and an integer dtype's `from`
// and `to - 1` must lie in its range, as on the CPU (a uint8 tensor's
// random_(0, 300) is refused, not wrapped).
at::Tensor& randomFromAnyDtype_(at::Tensor& self, int64_t from,
                                std::optional<int64_t> to,
                                std::optional<at::Generator> generator) {
  if (drawsDirectly(self) || self.scalar_type() == at::kLong) {
    return randomFrom_(self, from, to, generator);
  }
  const auto [first, range] = integerRange(self, from, to);
  at::Tensor buffer = at::empty(self.sizes(), self.options().dtype(at::kLong));
  randomRange("aten::random_.from", buffer, first, range, generator);
  return self.copy_(buffer);
}

at::Tensor& randomToAnyDtype_(at::Tensor& self, int64_t to,
                              std::optional<at::Generator> generator) {
  return randomFromAnyDtype_(self, 0, to, generator);
}

at::Tensor& randomAnyDtype_(at::Tensor& self,
                            std::optional<at::Generator> generator) {
  return randomFromAnyDtype_(self, 0, std::nullopt, generator);
}

// multinomial reads weights: others than Float and Double are read as Float.
at::Tensor& multinomialOutAnyDtype(const at::Tensor& self, int64_t samples,
                                   bool replacement,
                                   std::optional<at::Generator> generator,
                                   at::Tensor& out) {
  const at::Tensor weights = drawsDirectly(self) ? self : self.to(at::kFloat);
  return multinomialOut(weights, samples, replacement, generator, out);
}

at::Tensor multinomialAnyDtype(const at::Tensor& self, int64_t samples,
                               bool replacement,
                               std::optional<at::Generator> generator) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return multinomialOutAnyDtype(self, samples, replacement, generator, out);
}

std::tuple<at::Tensor, at::Tensor> nativeDropoutAnyDtype(
    const at::Tensor& input, double p, std::optional<bool> train) {
  if (drawsDirectly(input)) {
    return nativeDropout(input, p, train);
  }
  auto [output, mask] = nativeDropout(input.to(at::kFloat), p, train);
  return {output.to(input.scalar_type()), mask};
}

// The gradient draws nothing: other dtypes compute grad * mask * scale with
// ember's elementwise operators, the CPU's formula (with its promotions).
at::Tensor nativeDropoutBackwardAnyDtype(const at::Tensor& grad,
                                         const at::Tensor& mask,
                                         double scale) {
  if (drawsDirectly(grad)) {
    return nativeDropoutBackward(grad, mask, scale);
  }
  return at::mul(at::mul(grad, mask), scale);
}

} // namespace ember
// ember-book: end random_dtypes
