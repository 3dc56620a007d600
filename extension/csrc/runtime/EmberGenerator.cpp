// ember's random number generator: a counter-based generator per device,
// reached through the PrivateUse1 hooks' slots (runtime/EmberHooks.h), and
// the one call random kernels make to it (reserveRandom).
#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>
#include <torch/library.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "runtime/EmberGenerator.h"
#include "aten/EmberRecordedLaunch.h"
#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"
#include "runtime/EmberHooks.h"

// ember-book: begin generator_impl
namespace ember {

// A counter-based generator keeps no evolving state: a random number is a
// pure function of (seed, counter), computed by the kernels (Philox, see
// EmberRandom.cpp). The generator only hands out counters. Each random call
// reserves `offset`, and every element of that call derives its numbers from
// (seed, offset, element index), so elements are independent of the order,
// or the threads, that compute them. Saving the state is saving two numbers.
class EmberGenerator final : public c10::GeneratorImpl {
 public:
  explicit EmberGenerator(c10::DeviceIndex device)
      : c10::GeneratorImpl(
            c10::Device(c10::DeviceType::PrivateUse1, device),
            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  // check_generator<EmberGenerator> compares this with a generator's device.
  static c10::DeviceType device_type() {
    return c10::DeviceType::PrivateUse1;
  }

  // Seeding restarts the stream, as on every PyTorch device.
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override {
    return seed_;
  }
  // torch.seed() / Generator.seed(): a fresh nondeterministic seed.
  uint64_t seed() override {
    set_current_seed(c10::detail::getNonDeterministicRandom());
    return seed_;
  }
  void set_offset(uint64_t offset) override {
    offset_ = offset;
  }
  uint64_t get_offset() const override {
    return offset_;
  }

  // The state as torch.Generator.get_state() returns it: a CPU byte tensor,
  // here 16 bytes, the seed and the offset.
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::Tensor state = at::empty({kStateSize}, at::kByte);
    auto* bytes = state.mutable_data_ptr<uint8_t>();
    std::memcpy(bytes, &seed_, sizeof(seed_));
    std::memcpy(bytes + sizeof(seed_), &offset_, sizeof(offset_));
    return state.getIntrusivePtr();
  }

  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == at::kByte && state.numel() == kStateSize &&
                    state.is_contiguous() && state.device().is_cpu(),
                "ember: the state of the random number generator of ",
                device(), " is a contiguous CPU uint8 tensor of ", kStateSize,
                " bytes (seed and offset); got ",
                c10::typeMetaToScalarType(state.dtype()), " with ",
                state.numel(), " elements on ", state.device());
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, sizeof(seed_));
    std::memcpy(&offset_, bytes + sizeof(seed_), sizeof(offset_));
  }

  // Reserves `count` counter values for one random call and returns the
  // first. The caller holds mutex_ (Note [Acquire lock when using random
  // generators] in ATen).
  uint64_t reserve(uint64_t count) {
    const uint64_t first = offset_;
    offset_ += count;
    return first;
  }

 private:
  static constexpr int64_t kStateSize = 2 * sizeof(uint64_t);

  EmberGenerator* clone_impl() const override {
    auto* copy = new EmberGenerator(device().index());
    copy->seed_ = seed_;
    copy->offset_ = offset_;
    return copy;
  }

  uint64_t seed_ = c10::default_rng_seed_val;
  uint64_t offset_ = 0;
};

} // namespace ember
// ember-book: end generator_impl

// ember-book: begin default_generators
#include "runtime/EmberHooks.h" // the slots: PlugDefaultGenerator, PlugNewGenerator

namespace ember {

// One default generator per device, created on first use: what random
// kernels use without a generator argument, and what torch.manual_seed
// seeds. The hooks call this with a valid index (they check it first).
const at::Generator& defaultGenerator(c10::DeviceIndex device) {
  static std::once_flag once;
  static std::vector<at::Generator> generators;
  static std::vector<std::once_flag> created;
  std::call_once(once, [] {
    int count = 0;
    EMBER_CHECK(emGetDeviceCount(&count));
    generators.resize(count);
    created = std::vector<std::once_flag>(count);
  });
  std::call_once(created.at(device), [device] {
    generators[device] = at::make_generator<EmberGenerator>(device);
  });
  return generators[device];
}

// torch.Generator(device=...): a generator of the caller's own.
at::Generator newGenerator(c10::DeviceIndex device) {
  return at::make_generator<EmberGenerator>(device);
}

// Into the hooks' slots, for as long as this library is loaded. The hooks
// themselves were registered once, by the stable library.
static PlugDefaultGenerator plug_default_generator(&defaultGenerator);
static PlugNewGenerator plug_new_generator(&newGenerator);

} // namespace ember
// ember-book: end default_generators

// ember-book: begin reserve_random
namespace ember {

// A random kernel that launches in place (chapter 4's launch) cannot be
// recorded, and a replay would draw the same numbers again. While the stream
// captures, it is refused here (refuseWhileCapturing, EmberRecordedLaunch.h),
// before any number is reserved. A recorded kernel reserves through
// reserveRecordedRandom (below), which calls this only eagerly.
// The generator argument of a random operator, or the default generator of
// the tensor's device. A generator of another device is refused: its numbers
// would not be ember's, or not this device's.
PhiloxSeed reserveRandom(const char* op,
                         const std::optional<at::Generator>& generator,
                         const at::Tensor& self, uint64_t count) {
  const c10::Device device = self.device();
  refuseWhileCapturing(op, device);
  at::Generator chosen = generator.has_value() && generator->defined()
      ? *generator
      : at::detail::getPrivateUse1Hooks().getDefaultGenerator(device.index());
  TORCH_CHECK(chosen.device() == device, "ember: ", op, " got a generator on ",
              chosen.device(), " for a tensor on ", device,
              "; pass a generator of that device (torch.Generator(device=\"",
              device, "\"))");
  auto* impl = chosen.get<EmberGenerator>();
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return {impl->current_seed(), impl->reserve(count)};
}

} // namespace ember
// ember-book: end reserve_random

// ember-book: begin recorded_random
#include <map>

namespace ember {

// The graphs capturing random calls, per device and capturing stream: how
// many counter values each has reserved, and the base its replays write.
// Guarded by the device's default generator's mutex.
struct RandomCapture {
  std::shared_ptr<GraphRandomBase> base;
  uint64_t reserved = 0;
};
std::map<std::pair<c10::DeviceIndex, int64_t>, RandomCapture>& randomCaptures() {
  static std::map<std::pair<c10::DeviceIndex, int64_t>, RandomCapture> captures;
  return captures;
}

RecordedPhiloxSeed reserveRecordedRandom(
    const char* op, const std::optional<at::Generator>& generator,
    const at::Tensor& self, uint64_t count) {
  const c10::Device device = self.device();
  if (!streamCaptures(device)) {
    return {reserveRandom(op, generator, self, count), nullptr};
  }
  at::Generator chosen = defaultGenerator(device.index());
  TORCH_CHECK(!generator.has_value() || !generator->defined() ||
                  *generator == chosen,
              "ember: ", op, " cannot be captured with a generator of its "
              "own: a graph's replays draw from the default generator of ",
              device, "; leave generator= out of captured calls");
  emStream_t stream = 0;
  EMBER_CHECK(emGetStream(device.index(), &stream));
  std::lock_guard<std::mutex> lock(chosen.mutex());
  auto found = randomCaptures().find({device.index(), stream});
  if (found == randomCaptures().end()) {
    refuseWhileCapturing(op, device); // raises: a capture no graph began
    TORCH_CHECK(false, "ember: ", op, ": the capture on ", device, " ended");
  }
  const uint64_t first = found->second.reserved;
  found->second.reserved += count;
  return {{0, first}, found->second.base};
}

std::shared_ptr<GraphRandomBase> beginRandomCapture(c10::DeviceIndex device,
                                                    int64_t stream) {
  at::Generator generator = defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto base = std::make_shared<GraphRandomBase>();
  randomCaptures()[{device, stream}] = {base, 0};
  return base;
}

uint64_t endRandomCapture(c10::DeviceIndex device, int64_t stream) {
  at::Generator generator = defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto found = randomCaptures().find({device, stream});
  if (found == randomCaptures().end()) {
    return 0;
  }
  const uint64_t reserved = found->second.reserved;
  randomCaptures().erase(found);
  return reserved;
}

// emGraphLaunch runs the graph's kernels before it returns (ember_driver.h),
// so the base written here is the one this replay's kernels read.
void replayRandom(c10::DeviceIndex device, GraphRandomBase& base,
                  uint64_t count) {
  if (count == 0) {
    return;
  }
  at::Generator generator = defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  auto* impl = generator.get<EmberGenerator>();
  base.seed = impl->current_seed();
  base.offset = impl->reserve(count);
}

} // namespace ember
// ember-book: end recorded_random

// ember-book: begin generator_ops
namespace ember {

// The device module (torch.privateuseone, later torch.ember) needs each
// device's default generator, and Python has no way to ask the hooks for it.
// An operator can return a Generator: Python gets a torch.Generator that
// shares this one, like torch.cuda.default_generators[i].
at::Generator defaultGeneratorOp(int64_t device) {
  int count = 0;
  EMBER_CHECK(emGetDeviceCount(&count));
  TORCH_CHECK(device >= 0 && device < count, "ember: no ",
              c10::get_privateuse1_backend(), " device ", device, " (there are ",
              count, " devices)");
  return at::detail::getPrivateUse1Hooks().getDefaultGenerator(device);
}

} // namespace ember

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("default_generator(int device) -> Generator?",
        &ember::defaultGeneratorOp);
}
// ember-book: end generator_ops
