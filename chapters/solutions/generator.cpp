// The generator chapter's exercise solutions (not compiled by the package).

// ember-book: begin exercise_geometric
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember_exercise {

// The number of trials up to the first success: ceil(log u / log(1 - p)),
// u in (0, 1]; u = 1 would give 0, so the result is at least 1.
at::Tensor& geometric_(at::Tensor& self, double p,
                       std::optional<at::Generator> generator) {
  TORCH_CHECK(p > 0.0 && p < 1.0, "ember: geometric_ expects 0 < p < 1, got ",
              p);
  return ember::floatingRandom("aten::geometric_", self,
                               [&](auto zero) -> at::Tensor& {
    using T = decltype(zero);
    const T log_fail = std::log1p(-static_cast<T>(p));
    return ember::randomFill<T>(
        "aten::geometric_", self, generator, [=](const ember::Philox& r) {
          const T u = T(1) - ember::uniform01<T>(r, 0);
          return std::max(T(1), std::ceil(std::log(u) / log_fail));
        });
  });
}

} // namespace ember_exercise
#pragma GCC pop_options

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("geometric_", &ember_exercise::geometric_);
}
// ember-book: end exercise_geometric
