// The random kernels' entry points that random_registration registers
// (EmberRandom.cpp): chapter 14's wrappers for every dtype, chapter 10's
// randperm.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

// ember-book: begin random_entry_points
// Declared in a header part: the registration is a revision of chapter 10's
// part and compiles where that part first stood, apart from the wrappers.
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
} // namespace ember
// ember-book: end random_entry_points
