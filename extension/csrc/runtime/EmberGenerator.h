// ember's generator as the random kernels (aten/EmberRandom.cpp) see it
// (runtime/EmberGenerator.cpp): a seed and a range of counter values.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>

#include <cstdint>
#include <memory>
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

// ember-book: begin recorded_random_decl
namespace ember {

// What a graph's random calls read when it replays: the seed and the
// offset its generator had when that replay started. The graph writes them
// (replayRandom) before each replay.
struct GraphRandomBase {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

// The key of a random call that a graph may record. Eagerly, `key` is the
// call's key. Captured, `key.offset` is the call's place among the graph's
// counter values, and `base` is what each replay adds it to: a replay draws
// new numbers, the ones the same eager calls would have drawn.
struct RecordedPhiloxSeed {
  PhiloxSeed key;
  std::shared_ptr<const GraphRandomBase> base;
  // Read in the kernel's body: when a replay runs it, not when captured.
  PhiloxSeed get() const {
    return base == nullptr ? key
                           : PhiloxSeed{base->seed, base->offset + key.offset};
  }
};

// reserveRandom for a kernel that launches with launchRecorded. While the
// device's current stream captures for a graph, it reserves from the
// graph's counter values instead; the device's default generator is the
// one a graph replays from, so a generator of one's own is refused.
RecordedPhiloxSeed reserveRecordedRandom(
    const char* op, const std::optional<at::Generator>& generator,
    const at::Tensor& self, uint64_t count);

// For the graph (EmberGraph.cpp). A capture on (device, stream), stream an
// emStream_t, counts the counter values its random calls reserve; its end
// returns how many. Each replay takes that many from the default generator,
// as the same eager calls would, and writes where they start into `base`.
std::shared_ptr<GraphRandomBase> beginRandomCapture(c10::DeviceIndex device,
                                                    int64_t stream);
uint64_t endRandomCapture(c10::DeviceIndex device, int64_t stream);
void replayRandom(c10::DeviceIndex device, GraphRandomBase& base,
                  uint64_t count);

} // namespace ember
// ember-book: end recorded_random_decl
