// The PrivateUse1 hooks: what PyTorch asks a backend outside the dispatcher.
//
// The autograd engine, torch.accelerator, torch.Generator, storage resizing,
// pinned memory and serialization all reach a backend through one object,
// at::PrivateUse1HooksInterface, and PyTorch accepts exactly one per process
// (a second at::RegisterPrivateUse1HooksInterface call is refused). So ember's
// hooks are registered once, by the library that holds them, and answer what
// the driver alone can answer: device count, current device, which device owns
// a pointer.
//
// The rest (generators, resizing, pinned memory, tensor metadata for
// serialization) comes from code that may be compiled later and replaced: the
// book rebuilds a chapter's backend many times in one process. Each of those
// answers is a SLOT here. Code plugs its function in with an RAII object
// declared at namespace scope:
//
//   const at::Generator& defaultGenerator(c10::DeviceIndex device);
//   static ember::PlugDefaultGenerator plug_default_generator(&defaultGenerator);
//
// The plug's destructor empties the slot again, so unloading (or retiring) the
// library that plugged it leaves no pointer into unmapped code. An empty slot
// answers with an error that says what is missing and what provides it.
#pragma once

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/util/Exception.h>

namespace at {
class Tensor;
struct GraphImplArgs;
struct GraphImplInterface;
} // namespace at

namespace libkineto {
class Config;
class IActivityProfilerSession;
enum class ActivityType;
} // namespace libkineto

namespace ember {

// What the slots hold: plain function pointers. The hooks resolve a device
// index of -1 (the current device) and check its range before they call a
// generator function, which therefore always gets a valid ember device.
using DefaultGeneratorFn = const at::Generator& (*)(c10::DeviceIndex device);
using NewGeneratorFn = at::Generator (*)(c10::DeviceIndex device);
using ResizeBytesFn = void (*)(const c10::Storage& storage, size_t new_bytes);
using IsPinnedPtrFn = bool (*)(const void* data);
using PinnedAllocatorFn = c10::Allocator* (*)();
// Writes (serializer) or reads and applies (deserializer) a tensor's backend
// metadata as string -> bool entries: torch::jit's BackendMetaPtr signature.
using BackendMetaFn = void (*)(const at::Tensor& tensor,
                               std::unordered_map<std::string, bool>& metadata);
// Makes one graph (torch.accelerator.Graph) for the device.
using GraphImplFn =
    std::unique_ptr<at::GraphImplInterface> (*)(const at::GraphImplArgs& args);
// Makes the session of one profiled run (torch.profiler, through Kineto).
using ProfilerSessionFn =
    std::unique_ptr<libkineto::IActivityProfilerSession> (*)(
        const std::set<libkineto::ActivityType>& types,
        const libkineto::Config& config);

// One function pointer that PyTorch-facing code calls and later code plugs.
// Lock-free: the hooks read it on every call, from any thread.
template <typename Fn>
class HooksSlot {
 public:
  // `what` names the missing piece ("random number generator"), `provider`
  // says where it comes from ("the generator chapter adds one"); both go into the error.
  constexpr HooksSlot(const char* what, const char* provider) noexcept
      : what_(what), provider_(provider) {}
  HooksSlot(const HooksSlot&) = delete;
  HooksSlot& operator=(const HooksSlot&) = delete;

  // The plugged function, or nullptr.
  Fn get() const noexcept {
    return fn_.load(std::memory_order_acquire);
  }

  // The plugged function; an empty slot fails with a message naming the
  // operation PyTorch attempted (e.g. "create a generator").
  Fn require(const char* operation) const {
    const Fn fn = get();
    TORCH_CHECK(fn != nullptr, "ember: cannot ", operation, ": no ", what_,
                " is registered (", provider_, ")");
    return fn;
  }

 private:
  template <typename>
  friend class SlotPlug;
  std::atomic<Fn> fn_{nullptr};
  const char* what_;
  const char* provider_;
};

// Plugs `fn` into `slot` for the plug's lifetime. The last plug wins; a plug's
// destructor empties the slot only if the slot still holds its function, so
// an older plug dying never unplugs a newer one.
template <typename Fn>
class SlotPlug {
 public:
  SlotPlug(HooksSlot<Fn>& slot, Fn fn) noexcept : slot_(slot), fn_(fn) {
    slot_.fn_.store(fn_, std::memory_order_release);
  }
  ~SlotPlug() {
    Fn expected = fn_;
    slot_.fn_.compare_exchange_strong(expected, nullptr,
                                      std::memory_order_acq_rel);
  }
  SlotPlug(const SlotPlug&) = delete;
  SlotPlug& operator=(const SlotPlug&) = delete;

 private:
  HooksSlot<Fn>& slot_;
  Fn fn_;
};

// The slots. They live in the library that registers the hooks (the book's
// stable library, or torch_ember._C), never in code that is rebuilt.
extern HooksSlot<DefaultGeneratorFn> default_generator_slot;
extern HooksSlot<NewGeneratorFn> new_generator_slot;
extern HooksSlot<ResizeBytesFn> resize_bytes_slot;
extern HooksSlot<IsPinnedPtrFn> is_pinned_ptr_slot;
extern HooksSlot<PinnedAllocatorFn> pinned_allocator_slot;
extern HooksSlot<BackendMetaFn> backend_meta_serializer_slot;
extern HooksSlot<BackendMetaFn> backend_meta_deserializer_slot;
extern HooksSlot<GraphImplFn> graph_impl_slot;

// PyTorch's graph registry (at::GraphImplRegistry) cannot forget a key, and a
// second registration of one ends the process: ember's key is registered once
// per process, from here, with a creator that calls graph_impl_slot.
void registerGraphImplOnce();
extern HooksSlot<ProfilerSessionFn> profiler_session_slot;

// Kineto makes a device's activity profiler once per process and keeps it: the
// stable library registers one (EmberHooks.cpp) that asks profiler_session_slot
// for each run's session, so a rebuilt backend's sessions are the ones used.
void registerProfilerOnce();

// The plugs, one per thing a later chapter provides.
struct PlugDefaultGenerator : SlotPlug<DefaultGeneratorFn> {
  explicit PlugDefaultGenerator(DefaultGeneratorFn fn) noexcept
      : SlotPlug(default_generator_slot, fn) {}
};

struct PlugNewGenerator : SlotPlug<NewGeneratorFn> {
  explicit PlugNewGenerator(NewGeneratorFn fn) noexcept
      : SlotPlug(new_generator_slot, fn) {}
};

struct PlugResizeBytes : SlotPlug<ResizeBytesFn> {
  explicit PlugResizeBytes(ResizeBytesFn fn) noexcept
      : SlotPlug(resize_bytes_slot, fn) {}
};

// Pinned host memory comes as a pair: the allocator and the test for its
// pointers.
struct PlugPinnedMemory {
  PlugPinnedMemory(IsPinnedPtrFn is_pinned, PinnedAllocatorFn allocator) noexcept
      : is_pinned_(is_pinned_ptr_slot, is_pinned),
        allocator_(pinned_allocator_slot, allocator) {}

 private:
  SlotPlug<IsPinnedPtrFn> is_pinned_;
  SlotPlug<PinnedAllocatorFn> allocator_;
};

// torch.save / torch.load of ember tensors: the serializer adds entries to a
// tensor's metadata, the deserializer reads them back.
struct PlugBackendMeta {
  PlugBackendMeta(BackendMetaFn serialize, BackendMetaFn deserialize) noexcept
      : serialize_(backend_meta_serializer_slot, serialize),
        deserialize_(backend_meta_deserializer_slot, deserialize) {}

 private:
  SlotPlug<BackendMetaFn> serialize_;
  SlotPlug<BackendMetaFn> deserialize_;
};

// Graphs (the compile chapter). The plug also registers ember's key, the first time.
struct PlugGraphImpl : SlotPlug<GraphImplFn> {
  explicit PlugGraphImpl(GraphImplFn fn) : SlotPlug(graph_impl_slot, fn) {
    registerGraphImplOnce();
  }
};

// The profiler's sessions (the profiler chapter). The plug also registers the profiler,
// the first time.
struct PlugProfilerSession : SlotPlug<ProfilerSessionFn> {
  explicit PlugProfilerSession(ProfilerSessionFn fn)
      : SlotPlug(profiler_session_slot, fn) {
    registerProfilerOnce();
  }
};

// The hooks object PyTorch calls. Registered once, from a static initializer
// in EmberHooks.cpp.
struct EmberHooks final : at::PrivateUse1HooksInterface {
  bool isBuilt() const override;
  bool isAvailable() const override;
  bool hasPrimaryContext(c10::DeviceIndex device) const override;
  void init() const override;

  c10::DeviceIndex deviceCount() const override;
  c10::DeviceIndex getCurrentDevice() const override;
  void setCurrentDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override;
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override;
  at::Device getDeviceFromPtr(void* data) const override;

  const at::Generator& getDefaultGenerator(
      c10::DeviceIndex device) const override;
  at::Generator getNewGenerator(c10::DeviceIndex device) const override;
  void resizePrivateUse1Bytes(const c10::Storage& storage,
                              size_t new_bytes) const override;
  bool isPinnedPtr(const void* data) const override;
  c10::Allocator* getPinnedMemoryAllocator() const override;
};

} // namespace ember
