// ember's PrivateUse1 hooks, their slots, and their one-time registration.
//
// This file is compiled once into a library that stays loaded for the life of
// the process: torch_ember._C in the finished package, libember_stable.so in
// the book (book/builds/stable.py). Both registrations below are once-per-process in
// PyTorch, so they must not live in code that is rebuilt.

// Kineto's headers declare the profiler interfaces only under USE_KINETO (set
// by PyTorch's own build, not an extension's); header-only fmt, because
// libtorch does not export the fmt symbols Kineto's inline code uses.
#define USE_KINETO
#define FMT_HEADER_ONLY

#include "runtime/EmberHooks.h"

#include <ATen/core/GraphImplInterface.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <mutex>

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"

namespace ember {

// Constant-initialized (constexpr constructors), so they are usable before any
// static initializer runs, including a plug's in another library.
HooksSlot<DefaultGeneratorFn> default_generator_slot{
    "random number generator", "chapter 10 adds one"};
HooksSlot<NewGeneratorFn> new_generator_slot{"random number generator",
                                             "chapter 10 adds one"};
HooksSlot<ResizeBytesFn> resize_bytes_slot{"storage resize function",
                                           "chapter 12 adds one"};
HooksSlot<IsPinnedPtrFn> is_pinned_ptr_slot{
    "pinned host memory allocator", "chapter 11 adds one"};
HooksSlot<PinnedAllocatorFn> pinned_allocator_slot{
    "pinned host memory allocator", "chapter 11 adds one"};
HooksSlot<BackendMetaFn> backend_meta_serializer_slot{
    "backend metadata serializer", "chapter 12 adds one"};
HooksSlot<BackendMetaFn> backend_meta_deserializer_slot{
    "backend metadata deserializer", "chapter 12 adds one"};
HooksSlot<GraphImplFn> graph_impl_slot{"graph implementation",
                                       "chapter 15 adds one"};
HooksSlot<ProfilerSessionFn> profiler_session_slot{"activity profiler",
                                                   "chapter 16 adds one"};

void registerGraphImplOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    // PyTorch looks an implementation up by DeviceTypeName(PrivateUse1):
    // "EMBER", the backend's name since the renaming chapter, in capitals.
    at::GraphImplRegistry()->Register(
        "EMBER", [](at::GraphImplArgs args) {
          return graph_impl_slot.require("create a graph")(args);
        });
  });
}

namespace {

// ember-book: begin profiler_registration
// What Kineto keeps for the process: which activities ember records, and a
// session for each profiled run, made by the build that is loaded then.
class EmberProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override {
    return name_;
  }

  const std::set<libkineto::ActivityType>& availableActivities()
      const override {
    return activities_;
  }

  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    const ProfilerSessionFn session = profiler_session_slot.get();
    return session != nullptr ? session(types, config) : nullptr;
  }

  // What Kineto calls (with a start time and a duration it keeps itself).
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*ts_ms*/,
      int64_t /*duration_ms*/,
      const std::set<libkineto::ActivityType>& types,
      const libkineto::Config& config) override {
    return configure(types, config);
  }

 private:
  std::string name_{"ember"};
  std::set<libkineto::ActivityType> activities_{
      libkineto::ActivityType::CONCURRENT_KERNEL,
      libkineto::ActivityType::GPU_MEMCPY,
      libkineto::ActivityType::PRIVATEUSE1_RUNTIME};
};
// ember-book: end profiler_registration

c10::DeviceIndex driverDeviceCount() noexcept {
  int count = 0;
  return emGetDeviceCount(&count) == emSuccess
      ? static_cast<c10::DeviceIndex>(count)
      : 0;
}

// Generators are per device, and PyTorch passes -1 for "the current device".
// A plugged generator function gets a valid index either way.
c10::DeviceIndex resolveDevice(c10::DeviceIndex device) {
  if (device == -1) {
    int current = 0;
    EMBER_CHECK(emGetDevice(&current));
    return static_cast<c10::DeviceIndex>(current);
  }
  // The driver owns the rule for device indices: any per-device query checks
  // the index and, if it is bad, says which and what the range is.
  emMemStats stats{};
  EMBER_CHECK(emMemGetStats(device, &stats));
  return device;
}

} // namespace

// PyTorch hands the factory to Kineto at its first profile (or at once, if
// Kineto is running), and Kineto calls it once.
void registerProfilerOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    torch::profiler::impl::PrivateUse1ProfilerRegistry::instance()
        .registerFactory([]() -> std::unique_ptr<libkineto::IActivityProfiler> {
          return std::make_unique<EmberProfiler>();
        });
  });
}

// ember-book: begin hooks_context
// The driver is linked in, so ember is always "built" and is available when
// the driver reports a device. Neither may throw.
bool EmberHooks::isBuilt() const {
  return true;
}

bool EmberHooks::isAvailable() const {
  return driverDeviceCount() > 0;
}

// CUDA creates a context per device lazily; the simulated driver has nothing
// to create, so every valid device is ready.
bool EmberHooks::hasPrimaryContext(c10::DeviceIndex device) const {
  return device >= 0 && device < driverDeviceCount();
}
// ember-book: end hooks_context

// Lazy initialization (at::globalContext().lazyInitDevice): nothing to set
// up, but a driver that cannot answer should fail here, not later.
void EmberHooks::init() const {
  int count = 0;
  EMBER_CHECK(emGetDeviceCount(&count));
}

// The device queries of torch.accelerator's hooks API, from the driver. (Its
// public set_device_index/current_device_index go through the device guard.)
c10::DeviceIndex EmberHooks::deviceCount() const {
  return driverDeviceCount();
}

c10::DeviceIndex EmberHooks::getCurrentDevice() const {
  int device = 0;
  EMBER_CHECK(emGetDevice(&device));
  return static_cast<c10::DeviceIndex>(device);
}

// The driver checks the index and says what is wrong with a bad one.
void EmberHooks::setCurrentDevice(c10::DeviceIndex device) const {
  EMBER_CHECK(emSetDevice(device));
}

c10::DeviceIndex EmberHooks::exchangeDevice(c10::DeviceIndex device) const {
  const c10::DeviceIndex previous = getCurrentDevice();
  if (device != previous) {
    setCurrentDevice(device);
  }
  return previous;
}

// "maybe": CUDA avoids creating a context here. There is none to create.
c10::DeviceIndex EmberHooks::maybeExchangeDevice(
    c10::DeviceIndex device) const {
  return exchangeDevice(device);
}

// at::from_blob asks which device owns memory when it is given only the
// device type; the driver knows for every pointer emMalloc returned.
at::Device EmberHooks::getDeviceFromPtr(void* data) const {
  int device = 0;
  EMBER_CHECK(emPointerGetDevice(data, &device));
  return {c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)};
}

// The per-device default generator: what random kernels use when called
// without a generator, and what seeding sets.
const at::Generator& EmberHooks::getDefaultGenerator(
    c10::DeviceIndex device) const {
  const auto fn =
      default_generator_slot.require("get the default random number generator");
  return fn(resolveDevice(device));
}

// torch.Generator(device="ember").
at::Generator EmberHooks::getNewGenerator(c10::DeviceIndex device) const {
  const auto fn = new_generator_slot.require("create a random number generator");
  return fn(resolveDevice(device));
}

// UntypedStorage.resize_() on an ember storage.
void EmberHooks::resizePrivateUse1Bytes(const c10::Storage& storage,
                                        size_t new_bytes) const {
  resize_bytes_slot.require("resize a storage")(storage, new_bytes);
}

// Asked about every CPU tensor (Tensor.is_pinned()), so an empty slot is an
// answer, not an error: without a pinned allocator nothing is pinned.
bool EmberHooks::isPinnedPtr(const void* data) const {
  const auto fn = is_pinned_ptr_slot.get();
  return fn != nullptr && fn(data);
}

// torch.empty(..., pin_memory=True) and Tensor.pin_memory().
c10::Allocator* EmberHooks::getPinnedMemoryAllocator() const {
  return pinned_allocator_slot.require("allocate pinned host memory")();
}

namespace {

// torch::jit keeps these forwarders for good (it refuses a second
// registration); they call whatever is plugged now. Without a plug an ember
// tensor simply has no backend metadata, which is not an error.
void serializeBackendMeta(const at::Tensor& tensor,
                          std::unordered_map<std::string, bool>& metadata) {
  if (const auto fn = backend_meta_serializer_slot.get()) {
    fn(tensor, metadata);
  }
}

void deserializeBackendMeta(const at::Tensor& tensor,
                            std::unordered_map<std::string, bool>& metadata) {
  if (const auto fn = backend_meta_deserializer_slot.get()) {
    fn(tensor, metadata);
  }
}

// ember-book: begin hooks_registration
// PyTorch keeps a plain pointer to the hooks until the process ends, and other
// libraries' static destructors may still call them: never destroy them.
union ImmortalHooks {
  EmberHooks hooks;
  ImmortalHooks() : hooks() {}
  ~ImmortalHooks() {}
};

ImmortalHooks immortal_hooks;

// An exception thrown while a library loads ends the process
// (std::terminate), so check instead of letting PyTorch refuse.
struct RegisterEmberHooks {
  RegisterEmberHooks() {
    if (at::isPrivateUse1HooksRegistered()) {
      TORCH_WARN("ember: another library already registered PrivateUse1 hooks "
                 "in this process; ember's hooks are not used");
    } else {
      at::RegisterPrivateUse1HooksInterface(&immortal_hooks.hooks);
    }
    const auto type = static_cast<size_t>(c10::DeviceType::PrivateUse1);
    if (!torch::jit::GetBackendMetaSerialization()[type].has_value()) {
      torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1,
                                            &serializeBackendMeta,
                                            &deserializeBackendMeta);
    }
  }
};

RegisterEmberHooks register_ember_hooks;
// ember-book: end hooks_registration

} // namespace

} // namespace ember
