// ember's generator as the random kernels (aten/EmberRandom.cpp) see it
// (runtime/EmberGenerator.cpp): a seed and a range of counter values.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

// ember-book: begin reserve_random_decl
namespace ember {

// A Philox key and the first counter value reserved for one random call.
struct PhiloxSeed {
  uint64_t seed;
  uint64_t offset;
};

// Reserves `count` counter values of the generator a random operator uses:
// its Generator argument if given, else the default generator of the
// device `self` is on. A generator of another device is an error.
PhiloxSeed reserveRandom(const char* op,
                         const std::optional<at::Generator>& generator,
                         const at::Tensor& self, uint64_t count);

} // namespace ember
// ember-book: end reserve_random_decl
