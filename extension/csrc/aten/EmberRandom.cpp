// ember's random kernels, on the device, from Philox counters that the
// generator (runtime/EmberGenerator.cpp) reserves: uniform_, normal_,
// random_, exponential_, bernoulli_, randperm, multinomial and dropout
// (native_dropout and its backward), the generator chapter; then what the conformance
// sweep (the capstone chapter) found missing, built from those draws: cauchy_,
// log_normal_, geometric_, normal with tensor arguments, rrelu's noise, and
// every dtype the kernels are not compiled for. The registrations close the
// file.
#include <ATen/ExpandUtils.h>
#include <ATen/Functions.h>
#include <ATen/Parallel.h>
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/Scalar.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <limits>
#include <numeric>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "aten/EmberLaunch.h"
#include "aten/EmberRecordedLaunch.h"
#include "runtime/EmberGenerator.h"

// ember-book: begin philox
namespace ember {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", 2011): ten rounds of multiply-and-xor turn a 128-bit counter and a
// 64-bit key into four random 32-bit words. The counter is (element index,
// call offset), the key is the seed: any element of any call can be computed
// alone, in any order, on any thread.
struct Philox {
  uint32_t word[4];
};

__attribute__((always_inline)) inline Philox philox(PhiloxSeed key,
                                                    uint64_t index) {
  uint32_t c0 = static_cast<uint32_t>(index), c1 = index >> 32;
  uint32_t c2 = static_cast<uint32_t>(key.offset), c3 = key.offset >> 32;
  uint32_t k0 = static_cast<uint32_t>(key.seed), k1 = key.seed >> 32;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{0xD2511F53} * c0;
    const uint64_t p1 = uint64_t{0xCD9E8D57} * c2;
    const uint32_t next0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t next2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    c1 = static_cast<uint32_t>(p1);
    c3 = static_cast<uint32_t>(p0);
    c0 = next0;
    c2 = next2;
    k0 += 0x9E3779B9; // the key schedule: golden ratio and sqrt(3) - 1
    k1 += 0xBB67AE85;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from the top bits: 24 for float, 53 for double (so every
// value is exactly representable and 1 is never reached).
template <typename T>
__attribute__((always_inline)) inline T uniform01(const Philox& r, int pair) {
  if constexpr (sizeof(T) == 4) {
    return static_cast<T>(r.word[pair * 2] >> 8) * 0x1p-24f;
  } else {
    const uint64_t bits =
        (uint64_t{r.word[pair * 2]} << 32) | r.word[pair * 2 + 1];
    return static_cast<T>(bits >> 11) * 0x1p-53;
  }
}

__attribute__((always_inline)) inline uint64_t bits64(const Philox& r) {
  return (uint64_t{r.word[0]} << 32) | r.word[1];
}

} // namespace ember
// ember-book: end philox

// ember-book: begin random_fill
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// self[i] = draw(philox(key, i)) for every element, i in row-major order.
// One counter per element per call (four 32-bit words are enough for every
// distribution here), so the generator's offset advances by 1 per call. A
// non-contiguous self gets its numbers through a contiguous temporary, so
// the numbers do not depend on the strides.
template <typename T, typename Draw>
at::Tensor& randomFill(const char* op, at::Tensor& self,
                       const std::optional<at::Generator>& generator,
                       const Draw& draw) {
  if (self.numel() == 0) {
    return self;
  }
  const RecordedPhiloxSeed recorded =
      reserveRecordedRandom(op, generator, self, 1);
  at::Tensor out = self.is_contiguous() ? self : at::empty(self.sizes(),
                                                          self.options());
  const int64_t n = out.numel();
  // Recordable (chapter 15b), as dropout: by value, the key read at run time.
  launchRecorded({out.data_ptr()}, [out, n, draw, recorded](ptrdiff_t offset) {
    const PhiloxSeed key = recorded.get();
    T* data = atOffset<T>(out, offset);
    at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        data[i] = draw(philox(key, i));
      }
    });
  });
  if (!out.is_same(self)) {
    self.copy_(out);
  }
  return self;
}

[[noreturn]] void noRandomKernelFor(const char* op, const at::Tensor& self,
                                    const char* supported) {
  TORCH_CHECK(false, "ember: ", op, " has no ember kernel for ",
              self.scalar_type(), " tensors on ", self.device(),
              " (ember draws ", supported, ")");
}

// The floating dtypes every distribution is compiled for.
template <typename F>
at::Tensor& floatingRandom(const char* op, at::Tensor& self, F&& f) {
  switch (self.scalar_type()) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    default: noRandomKernelFor(op, self, "Float and Double");
  }
}

at::Tensor& uniform_(at::Tensor& self, double from, double to,
                     std::optional<at::Generator> generator) {
  TORCH_CHECK(from <= to && std::isfinite(to - from), "ember: uniform_ expects "
              "from <= to with a finite range, got from=", from, " to=", to);
  return floatingRandom("aten::uniform_", self, [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T low = from, width = to - from;
    return randomFill<T>("aten::uniform_", self, generator,
                         [=](const Philox& r) {
                           // Rounding can reach `to` in float: keep [from, to).
                           const T x = low + width * uniform01<T>(r, 0);
                           return x < static_cast<T>(to) ? x : low;
                         });
  });
}

// Box-Muller: two uniforms give a standard normal. The first is taken in
// (0, 1] so that its log is finite.
at::Tensor& normal_(at::Tensor& self, double mean, double std,
                    std::optional<at::Generator> generator) {
  TORCH_CHECK(std >= 0.0, "ember: normal_ expects std >= 0.0, got ", std);
  return floatingRandom("aten::normal_", self, [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T mu = mean, sigma = std;
    return randomFill<T>("aten::normal_", self, generator,
                         [=](const Philox& r) {
                           const T u1 = T(1) - uniform01<T>(r, 0);
                           const T u2 = uniform01<T>(r, 1);
                           const T radius = std::sqrt(T(-2) * std::log(u1));
                           return mu + sigma * radius *
                               std::cos(T(2 * M_PI) * u2);
                         });
  });
}

// Inversion: -log(u) / lambda for u in (0, 1].
at::Tensor& exponential_(at::Tensor& self, double lambd,
                         std::optional<at::Generator> generator) {
  TORCH_CHECK(lambd > 0.0, "ember: exponential_ expects lambd > 0.0, got ",
              lambd);
  return floatingRandom("aten::exponential_", self,
                        [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T rate = lambd;
    return randomFill<T>("aten::exponential_", self, generator,
                         [=](const Philox& r) {
                           return -std::log(T(1) - uniform01<T>(r, 0)) / rate;
                         });
  });
}

at::Tensor& bernoulliScalar_(at::Tensor& self, double p,
                             std::optional<at::Generator> generator) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "ember: bernoulli_ expects 0 <= p <= 1, "
              "got p=", p);
  return floatingRandom("aten::bernoulli_.float", self,
                        [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T prob = p;
    return randomFill<T>("aten::bernoulli_.float", self, generator,
                         [=](const Philox& r) {
                           return uniform01<T>(r, 0) < prob ? T(1) : T(0);
                         });
  });
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end random_fill

// ember-book: begin random_integers
#include <ATen/Dispatch_v2.h> // AT_DISPATCH_V2
#include <ATen/native/DistributionTemplates.h> // ATen's rules for random_'s range

#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// The integers random_ draws, as (from, range): from + (64 random bits
// modulo range), range 0 standing for all 2^64 values. By ATen's rules
// (ATen/native/DistributionTemplates.h), so that ember accepts and refuses
// what the CPU does: [from, to), a float dtype's bounds moved to integers
// it holds exactly; without `to`, up to the largest integer the dtype holds
// exactly (2^24 for float, 2^53 for double) or its maximum (2^63 - 1 for
// Long); from = -2^63 without `to` draws all 2^64 values. An integer
// dtype's bounds must lie in its range; a float's beyond 2^digits warn.
std::pair<int64_t, uint64_t> integerRange(const at::Tensor& self,
                                          int64_t from,
                                          std::optional<int64_t> to) {
  namespace templates = at::native::templates;
  const at::ScalarType type = self.scalar_type();
  const bool floating = at::isFloatingType(type);
  TORCH_CHECK_NOT_IMPLEMENTED(
      floating || at::isIntegralType(type, /*includeBool=*/true),
      "ember: aten::random_ is not implemented for ", type, " tensors (on ",
      self.device(), ", as on the CPU)");
  TORCH_CHECK(!to.has_value() || from < *to, "ember: random_ expects from < "
              "to, got from=", from, " to=", *to);
  if (!to.has_value() && from == std::numeric_limits<int64_t>::lowest()) {
    return {from, 0};
  }
  int64_t last = 0; // the largest value drawn
  if (floating) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type,
                                    "random_", [&] {
      constexpr int digits = std::numeric_limits<scalar_t>::digits;
      from = templates::update_from<scalar_t>(from);
      // Without `to`, the CPU wants from below 2^digits, not at it.
      last = to.has_value() ? templates::update_to<scalar_t>(*to) - 1
                            : (int64_t{1} << std::min(digits, 62)) - 1;
    });
  } else {
    AT_DISPATCH_V2(type, "random_", AT_WRAP([&] {
      const auto lowest = static_cast<int64_t>(
          std::numeric_limits<scalar_t>::lowest());
      const auto highest = static_cast<int64_t>(
          std::numeric_limits<scalar_t>::max());
      last = to.has_value() ? *to - 1 : highest;
      TORCH_CHECK(from >= lowest && from <= highest, "ember: aten::random_ ",
                  "on ", self.device(), ": from is out of bounds for ", type,
                  " (got ", from, ")");
      TORCH_CHECK(last >= lowest && last <= highest, "ember: aten::random_ ",
                  "on ", self.device(), ": to - 1 is out of bounds for ",
                  type, " (got ", last, ")");
    }), AT_EXPAND(AT_INTEGRAL_TYPES_V2), at::kBool);
  }
  TORCH_CHECK(from <= last, "ember: random_ on ", type, " expects from < to ",
              "once both are rounded to the dtype, got from=", from,
              " to=", last + 1);
  if (floating) {
    if (!to.has_value()) {
      ++last; // [from, 2^digits], the end included
    }
    // Warns, as on the CPU, for a bound beyond what the dtype holds exactly.
    templates::check_from_to_in_range(from, last, self.dtype());
  }
  return {from, static_cast<uint64_t>(last) - static_cast<uint64_t>(from) + 1};
}

// Integers in [from, from + range) into self (Float, Double or Long). The
// sum wraps in unsigned arithmetic: from + offset may pass through 2^63.
at::Tensor& randomRange(const char* op, at::Tensor& self, int64_t from,
                        uint64_t range, std::optional<at::Generator> generator) {
  const auto fill = [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    return randomFill<T>(op, self, generator, [=](const Philox& r) {
      const uint64_t offset = range == 0 ? bits64(r) : bits64(r) % range;
      return static_cast<T>(
          static_cast<int64_t>(static_cast<uint64_t>(from) + offset));
    });
  };
  switch (self.scalar_type()) {
    case at::kFloat: return fill(float{});
    case at::kDouble: return fill(double{});
    case at::kLong: return fill(int64_t{});
    default: noRandomKernelFor(op, self, "Float, Double and Long");
  }
}

// random_(from, to): [from, to); without `to`, see integerRange.
at::Tensor& randomFrom_(at::Tensor& self, int64_t from,
                        std::optional<int64_t> to,
                        std::optional<at::Generator> generator) {
  const auto [first, range] = integerRange(self, from, to);
  return randomRange("aten::random_.from", self, first, range, generator);
}

at::Tensor& randomTo_(at::Tensor& self, int64_t to,
                      std::optional<at::Generator> generator) {
  return randomFrom_(self, 0, to, generator);
}

at::Tensor& random_(at::Tensor& self, std::optional<at::Generator> generator) {
  return randomFrom_(self, 0, std::nullopt, generator);
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end random_integers

// ember-book: begin bernoulli_randperm
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// bernoulli_(p) with a tensor of probabilities, broadcast to self.
at::Tensor& bernoulliTensor_(at::Tensor& self, const at::Tensor& p,
                             std::optional<at::Generator> generator) {
  const at::Tensor probs = p.to(self.device(), self.scalar_type())
                               .expand(self.sizes())
                               .contiguous();
  return floatingRandom("aten::bernoulli_.Tensor", self,
                        [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    if (self.numel() == 0) {
      return self;
    }
    const RecordedPhiloxSeed recorded =
        reserveRecordedRandom("aten::bernoulli_.Tensor", generator, self, 1);
    at::Tensor out = self.is_contiguous() ? self
                                          : at::empty(self.sizes(), self.options());
    // Recordable (chapter 15b). A replay that finds a probability outside
    // [0, 1] warns (no caller is there to raise to), as CUDA's device asserts
    // surface only at a later synchronize.
    launchRecorded({out.data_ptr(), probs.data_ptr()},
                   [out, probs, recorded](ptrdiff_t offset) {
      const PhiloxSeed key = recorded.get();
      T* data = atOffset<T>(out, offset);
      const T* prob = atOffset<const T>(probs, offset);
      for (int64_t i = 0; i < out.numel(); ++i) {
        TORCH_CHECK(prob[i] >= T(0) && prob[i] <= T(1), "ember: bernoulli_ "
                    "expects probabilities in [0, 1], got ", prob[i]);
        data[i] = uniform01<T>(philox(key, i), 0) < prob[i] ? T(1) : T(0);
      }
    });
    if (!out.is_same(self)) {
      self.copy_(out);
    }
    return self;
  });
}

// A random permutation of 0..n-1: Fisher-Yates, step i drawing from counter i.
at::Tensor& randpermOut(int64_t n, std::optional<at::Generator> generator,
                        at::Tensor& out) {
  TORCH_CHECK(n >= 0, "ember: randperm expects n >= 0, got ", n);
  TORCH_CHECK(out.scalar_type() == at::kLong, "ember: aten::randperm has no "
              "ember kernel for ", out.scalar_type(), " tensors on ",
              out.device(), " (ember permutes Long)");
  out.resize_({n});
  if (n == 0) {
    return out;
  }
  const RecordedPhiloxSeed recorded =
      reserveRecordedRandom("aten::randperm", generator, out, 1);
  at::Tensor result = out.is_contiguous() ? out : at::empty({n}, out.options());
  launchRecorded({result.data_ptr()}, [result, n, recorded](ptrdiff_t offset) {
    const PhiloxSeed key = recorded.get();
    int64_t* data = atOffset<int64_t>(result, offset);
    std::iota(data, data + n, int64_t{0});
    for (int64_t i = n - 1; i > 0; --i) {
      const auto j = static_cast<int64_t>(bits64(philox(key, i)) % (i + 1));
      std::swap(data[i], data[j]);
    }
  });
  if (!result.is_same(out)) {
    out.copy_(result);
  }
  return out;
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end bernoulli_randperm

// ember-book: begin multinomial
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// One row of multinomial. With replacement: inverse CDF, sample s from
// counter (row, s). Without: each category gets an exponential "arrival
// time" E/w from counter (row, category), and the first num_samples to
// arrive are the sample (weights 0 never arrive).
template <typename T>
void multinomialRow(const T* weights, int64_t categories, int64_t samples,
                    bool replacement, PhiloxSeed key, uint64_t row,
                    int64_t* out) {
  double total = 0;
  int64_t positive = 0;
  std::vector<double> cumulative(categories);
  for (int64_t c = 0; c < categories; ++c) {
    TORCH_CHECK(std::isfinite(weights[c]) && weights[c] >= 0, "ember: "
                "multinomial expects finite, non-negative weights, got ",
                weights[c]);
    total += weights[c];
    positive += weights[c] > 0;
    cumulative[c] = total;
  }
  TORCH_CHECK(total > 0, "ember: multinomial got a row of weights that sums "
              "to 0");
  if (replacement) {
    for (int64_t s = 0; s < samples; ++s) {
      const double u =
          uniform01<double>(philox(key, row * samples + s), 0) * total;
      const auto hit = std::upper_bound(cumulative.begin(), cumulative.end(), u);
      out[s] = std::min<int64_t>(hit - cumulative.begin(), categories - 1);
    }
    return;
  }
  TORCH_CHECK(samples <= positive, "ember: multinomial without replacement "
              "cannot draw ", samples, " samples from ", positive,
              " categories of non-zero weight");
  std::vector<double> arrival(categories);
  for (int64_t c = 0; c < categories; ++c) {
    const double u = 1.0 - uniform01<double>(philox(key, row * categories + c), 0);
    arrival[c] = weights[c] > 0 ? -std::log(u) / weights[c]
                                : std::numeric_limits<double>::infinity();
  }
  std::vector<int64_t> order(categories);
  std::iota(order.begin(), order.end(), int64_t{0});
  std::partial_sort(order.begin(), order.begin() + samples, order.end(),
                    [&](int64_t a, int64_t b) { return arrival[a] < arrival[b]; });
  std::copy(order.begin(), order.begin() + samples, out);
}

at::Tensor& multinomialOut(const at::Tensor& self, int64_t samples,
                           bool replacement,
                           std::optional<at::Generator> generator,
                           at::Tensor& out) {
  TORCH_CHECK(self.dim() == 1 || self.dim() == 2, "ember: multinomial expects "
              "a 1-D or 2-D tensor of weights, got ", self.dim(), " dimensions");
  TORCH_CHECK(samples > 0, "ember: multinomial expects num_samples > 0");
  const int64_t categories = self.size(-1);
  TORCH_CHECK(replacement || samples <= categories, "ember: multinomial "
              "cannot draw ", samples, " samples from ", categories,
              " categories without replacement");
  const int64_t rows = self.dim() == 2 ? self.size(0) : 1;
  TORCH_CHECK(out.scalar_type() == at::kLong && out.device() == self.device(),
              "ember: multinomial writes Long indices on ", self.device(),
              ", got an out tensor of ", out.scalar_type(), " on ", out.device());
  if (self.dim() == 2) {
    out.resize_({rows, samples});
  } else {
    out.resize_({samples});
  }
  const at::Tensor weights = self.contiguous();
  at::Tensor result = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  const auto run = [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const RecordedPhiloxSeed recorded =
        reserveRecordedRandom("aten::multinomial", generator, self, 1);
    // Recordable (chapter 15b): by value, the key read when the body runs.
    launchRecorded({weights.data_ptr(), result.data_ptr()},
                   [weights, result, rows, categories, samples, replacement,
                    recorded](ptrdiff_t offset) {
      const PhiloxSeed key = recorded.get();
      const T* w = atOffset<const T>(weights, offset);
      int64_t* indices = atOffset<int64_t>(result, offset);
      for (int64_t r = 0; r < rows; ++r) {
        multinomialRow(w + r * categories, categories, samples, replacement, key,
                       r, indices + r * samples);
      }
    });
    return result;
  };
  at::Tensor input = weights; // floatingRandom names the weights' dtype
  floatingRandom("aten::multinomial", input, run);
  if (!result.is_same(out)) {
    out.copy_(result);
  }
  return out;
}

at::Tensor multinomial(const at::Tensor& self, int64_t samples, bool replacement,
                       std::optional<at::Generator> generator) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return multinomialOut(self, samples, replacement, generator, out);
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end multinomial

// ember-book: begin dropout
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// torch.nn.functional.dropout on ember: ATen's dropout takes the fused path,
// native_dropout, for PrivateUse1 tensors (as for CUDA) when 0 < p < 1.
// Returns (input * mask / (1 - p), mask); the mask keeps an element with
// probability 1 - p.
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input,
                                                 double p,
                                                 std::optional<bool> train) {
  TORCH_CHECK(p >= 0.0 && p <= 1.0, "ember: dropout probability has to be "
              "between 0 and 1, but got ", p);
  at::Tensor mask = at::empty(input.sizes(), input.options().dtype(at::kBool));
  if (train.has_value() && !*train) {
    return {input.clone(), mask.fill_(true)};
  }
  const at::Tensor in = input.contiguous();
  at::Tensor output = at::empty(input.sizes(), input.options());
  if (input.numel() == 0) {
    return {output, mask};
  }
  at::Tensor self = output;
  floatingRandom("aten::native_dropout", self, [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T keep = T(1) - static_cast<T>(p);
    const T scale = p < 1.0 ? T(1) / keep : T(0);
    // Recordable (chapter 15b): the body owns what it uses, and reads its
    // key when it runs, so that each replay of a graph draws new numbers.
    const RecordedPhiloxSeed recorded =
        reserveRecordedRandom("aten::native_dropout", std::nullopt, input, 1);
    const int64_t n = in.numel();
    launchRecorded({in.data_ptr(), output.data_ptr(), mask.data_ptr()},
                   [in, output, mask, n, keep, scale,
                    recorded](ptrdiff_t offset) {
      const PhiloxSeed key = recorded.get();
      const T* x = atOffset<const T>(in, offset);
      T* y = atOffset<T>(output, offset);
      bool* kept = atOffset<bool>(mask, offset);
      at::parallel_for(0, n, 32768, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          kept[i] = uniform01<T>(philox(key, i), 0) < keep;
          y[i] = kept[i] ? x[i] * scale : T(0);
        }
      });
    });
    return self;
  });
  return {output, mask};
}

// The gradient: grad * mask * scale, scale being 1 / (1 - p).
at::Tensor nativeDropoutBackward(const at::Tensor& grad, const at::Tensor& mask,
                                 double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool && mask.sizes() == grad.sizes(),
              "ember: native_dropout_backward expects a Bool mask of the "
              "gradient's shape ", grad.sizes(), ", got ", mask.scalar_type(),
              " of shape ", mask.sizes());
  const at::Tensor g = grad.contiguous(), m = mask.contiguous();
  at::Tensor result = at::empty(grad.sizes(), grad.options());
  if (grad.numel() == 0) {
    return result;
  }
  floatingRandom("aten::native_dropout_backward", result,
                 [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T s = static_cast<T>(scale);
    const int64_t n = g.numel();
    launchRecorded({g.data_ptr(), m.data_ptr(), result.data_ptr()},
                   [g, m, result, n, s](ptrdiff_t offset) {
      const T* dy = atOffset<const T>(g, offset);
      const bool* kept = atOffset<const bool>(m, offset);
      T* dx = atOffset<T>(result, offset);
      for (int64_t i = 0; i < n; ++i) {
        dx[i] = kept[i] ? dy[i] * s : T(0);
      }
    });
    return result;
  });
  return result;
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end dropout

// ember-book: begin distributions
namespace ember {

// Chapter 10's kernels draw Float and Double. Other dtypes (BFloat16, or the
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
#include <ATen/Dispatch_v2.h> // AT_DISPATCH_V2
#include <ATen/native/DistributionTemplates.h> // ATen's rules for random_'s range

namespace ember {

// Chapter 10's random kernels (above), compiled for Float and Double
// (random_ also for Long). Declared again: the book compiles this part
// apart from chapter 10's, and it wraps them.
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
// The distributions' dtype check (above), declared for the same reason.
void checkFillable(const char* op, const at::Tensor& self, bool integers,
                   bool complex);

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

// The integers random_ draws, as (from, range): from + (64 random bits
// modulo range), range 0 standing for all 2^64 values. Chapter 10's
// integerRange took an integer dtype's bounds as int64, which for UInt64 is
// [0, -1]: every range was refused. These are ATen's steps, in its words
// (ATen/native/DistributionTemplates.h): [from, to), a float dtype's bounds
// moved to integers it holds exactly; without `to`, up to 2^digits for a
// float dtype or the dtype's maximum (UInt64's, as an int64, is -1: ATen
// refuses it too); from = -2^63 without `to` draws all 2^64 values. ATen's
// own bounds check, templates::check_from_to_in_range, checks an integer
// dtype's bounds against its range (UInt64's against [0, 2^63 - 1], since
// from and to are int64) and warns for a float's beyond 2^digits.
std::pair<int64_t, uint64_t> randomBounds(const at::Tensor& self,
                                          int64_t from,
                                          std::optional<int64_t> to) {
  namespace templates = at::native::templates;
  const at::ScalarType type = self.scalar_type();
  const bool floating = at::isFloatingType(type);
  TORCH_CHECK_NOT_IMPLEMENTED(
      floating || at::isIntegralType(type, /*includeBool=*/true),
      "ember: aten::random_ is not implemented for ", type, " tensors (on ",
      self.device(), ", as on the CPU)");
  if (to.has_value()) {
    int64_t end = *to;
    TORCH_CHECK(from < end, "random_ expects 'from' to be less than 'to', "
                "but got from=", from, " >= to=", end);
    if (floating) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type,
                                      "random_", [&] {
        from = templates::update_from<scalar_t>(from);
        end = templates::update_to<scalar_t>(end);
        TORCH_CHECK(from < end, "random_ expects 'from' casted to dtype to be "
                    "less than 'to' casted to dtype, but got from=", from,
                    " >= to=", end);
      });
    }
    templates::check_from_to_in_range(from, end - 1, self.dtype());
    return {from, static_cast<uint64_t>(end) - static_cast<uint64_t>(from)};
  }
  if (from == std::numeric_limits<int64_t>::lowest()) {
    // The CPU draws all 2^64 values for these dtypes only.
    TORCH_CHECK_NOT_IMPLEMENTED(!c10::isBarebonesUnsignedType(type),
                                "\"random_\" not implemented for '", type,
                                "' (ember, as on the CPU)");
    TORCH_CHECK(type == at::kLong || type == at::kDouble ||
                    type == at::kFloat || type == at::kBFloat16,
                "random_ from -2^63 without 'to' handles only int64, double, "
                "float and bfloat16 (ember, as on the CPU), got ", type);
    return {from, 0};
  }
  int64_t last = 0; // the largest value drawn
  if (floating) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, type,
                                    "random_", [&] {
      constexpr int digits = std::numeric_limits<scalar_t>::digits;
      last = int64_t{1} << std::min(digits, 62);
      from = templates::update_from<scalar_t>(from);
      TORCH_CHECK(from < last, "random_ expects 'from' casted to dtype to be "
                  "less than or equal to 'to_inc' casted to dtype, but got "
                  "from=", from, " > to_inc=", last);
    });
  } else {
    AT_DISPATCH_V2(type, "random_", AT_WRAP([&] {
      // UInt64's maximum becomes -1 here, as in ATen: its bounds check then
      // refuses a draw without `to` ("to - 1 is out of bounds").
      last = static_cast<int64_t>(std::numeric_limits<scalar_t>::max());
    }), AT_EXPAND(AT_INTEGRAL_TYPES_V2), at::kBool);
  }
  templates::check_from_to_in_range(from, last, self.dtype());
  return {from, static_cast<uint64_t>(last) - static_cast<uint64_t>(from) + 1};
}

// Integers: drawn as Long, then converted. The range follows the rules of
// self's dtype (randomBounds): without `to` it ends at the largest integer
// the dtype holds exactly, and an integer dtype's `from` and `to - 1` must
// lie in its range, as on the CPU (a uint8 tensor's random_(0, 300) is
// refused, not wrapped).
at::Tensor& randomFromAnyDtype_(at::Tensor& self, int64_t from,
                                std::optional<int64_t> to,
                                std::optional<at::Generator> generator) {
  const auto [first, range] = randomBounds(self, from, to);
  if (drawsDirectly(self) || self.scalar_type() == at::kLong) {
    return randomRange("aten::random_.from", self, first, range, generator);
  }
  at::Tensor buffer = at::empty(self.sizes(), self.options().dtype(at::kLong));
  randomRange("aten::random_.from", buffer, first, range, generator);
  return self.copy_(buffer);
}

at::Tensor& randomToAnyDtype_(at::Tensor& self, int64_t to,
                              std::optional<at::Generator> generator) {
  return randomFromAnyDtype_(self, 0, to, generator);
}

// random_() without bounds: the CPU has no kernel for the unsigned types
// beyond uint8 (uint16, uint32, uint64), whose bounds it would not know how
// to take; random_(to) and random_(from, to) draw them.
at::Tensor& randomAnyDtype_(at::Tensor& self,
                            std::optional<at::Generator> generator) {
  if (self.numel() == 0) {
    return self; // the CPU returns before looking at the dtype
  }
  TORCH_CHECK_NOT_IMPLEMENTED(!c10::isBarebonesUnsignedType(self.scalar_type()),
                              "\"random_\" not implemented for '",
                              self.scalar_type(), "' (ember, as on the CPU)");
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

// ember-book: begin random_registration
// Every random operator with a Generator argument that ember implements.
// Chapter 14 registers wrappers (random_dtypes) that also draw the dtypes
// the kernels above are not compiled for, and adds geometric_, cauchy_,
// log_normal_ and the rest (distributions).
namespace ember {
at::Tensor& uniformAnyDtype_(at::Tensor&, double, double,
                             std::optional<at::Generator>);
at::Tensor& normalAnyDtype_(at::Tensor&, double, double,
                            std::optional<at::Generator>);
at::Tensor& exponentialAnyDtype_(at::Tensor&, double,
                                 std::optional<at::Generator>);
at::Tensor& bernoulliScalarAnyDtype_(at::Tensor&, double,
                                     std::optional<at::Generator>);
at::Tensor& bernoulliTensorAnyDtype_(at::Tensor&, const at::Tensor&,
                                     std::optional<at::Generator>);
at::Tensor& randomAnyDtype_(at::Tensor&, std::optional<at::Generator>);
at::Tensor& randomToAnyDtype_(at::Tensor&, int64_t,
                              std::optional<at::Generator>);
at::Tensor& randomFromAnyDtype_(at::Tensor&, int64_t, std::optional<int64_t>,
                                std::optional<at::Generator>);
at::Tensor multinomialAnyDtype(const at::Tensor&, int64_t, bool,
                               std::optional<at::Generator>);
at::Tensor& multinomialOutAnyDtype(const at::Tensor&, int64_t, bool,
                                   std::optional<at::Generator>, at::Tensor&);
std::tuple<at::Tensor, at::Tensor> nativeDropoutAnyDtype(
    const at::Tensor&, double, std::optional<bool>);
at::Tensor nativeDropoutBackwardAnyDtype(const at::Tensor&, const at::Tensor&,
                                         double);
at::Tensor& randpermOut(int64_t n, std::optional<at::Generator> generator,
                        at::Tensor& out); // chapter 10's, unchanged

// Dropout's gradient in the gradient's layout, as PyTorch's meta kernel
// and CUDA's give it (chapter 18): a channels-last gradient, permuted to
// (N, H, W, C), is contiguous, so the kernel runs on that view and its
// result, permuted back, is channels-last. No copy of the gradient.
at::Tensor nativeDropoutBackwardInLayout(const at::Tensor& grad,
                                         const at::Tensor& mask,
                                         double scale) {
  const at::MemoryFormat layout = grad.suggest_memory_format();
  if (layout == at::MemoryFormat::Contiguous) {
    return nativeDropoutBackwardAnyDtype(grad, mask, scale);
  }
  const bool is_3d = layout == at::MemoryFormat::ChannelsLast3d;
  const std::vector<int64_t> to_last =
      is_3d ? std::vector<int64_t>{0, 2, 3, 4, 1}
            : std::vector<int64_t>{0, 2, 3, 1};
  const std::vector<int64_t> back = is_3d ? std::vector<int64_t>{0, 4, 1, 2, 3}
                                          : std::vector<int64_t>{0, 3, 1, 2};
  return nativeDropoutBackwardAnyDtype(grad.permute(to_last),
                                       mask.permute(to_last), scale)
      .permute(back);
}
} // namespace ember

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", &ember::uniformAnyDtype_);
  m.impl("normal_", &ember::normalAnyDtype_);
  m.impl("exponential_", &ember::exponentialAnyDtype_);
  m.impl("bernoulli_.float", &ember::bernoulliScalarAnyDtype_);
  m.impl("bernoulli_.Tensor", &ember::bernoulliTensorAnyDtype_);
  m.impl("random_", &ember::randomAnyDtype_);
  m.impl("random_.to", &ember::randomToAnyDtype_);
  m.impl("random_.from", &ember::randomFromAnyDtype_);
  m.impl("randperm.generator_out", &ember::randpermOut);
  m.impl("multinomial", &ember::multinomialAnyDtype);
  m.impl("multinomial.out", &ember::multinomialOutAnyDtype);
  m.impl("native_dropout", &ember::nativeDropoutAnyDtype);
  m.impl("native_dropout_backward", &ember::nativeDropoutBackwardInLayout);
}
// ember-book: end random_registration
