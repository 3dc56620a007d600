// Earlier versions of parts that chapter 01 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin device_guard.v1
namespace ember {

// PyTorch looks this up with c10::impl::getDeviceGuardImpl(PrivateUse1)
// whenever it reads or switches the current ember device: every
// c10::DeviceGuard, the storage constructor, later our kernels. The current
// device itself lives in the driver, per host thread, as in CUDA.
struct EmberGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return static_type;
  }

  c10::Device getDevice() const override {
    int device = 0;
    EMBER_CHECK(emGetDevice(&device));
    return c10::Device(static_type, static_cast<c10::DeviceIndex>(device));
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == static_type,
                "ember device guard: expected an ember device, got ", device);
    // The driver decides which indices exist and says what is wrong.
    EMBER_CHECK(emSetDevice(device.index()));
  }

  // Guards are constructed around many calls: skip the driver call when the
  // device is already current.
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (previous != device) {
      setDevice(device);
    }
    return previous;
  }

  // Called from guard destructors to restore the previous device: must not
  // throw, and the device was valid when the guard saved it.
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    (void)emSetDevice(device.index());
  }

  // deviceCount() is called while PyTorch probes backends; it must not throw.
  c10::DeviceIndex deviceCount() const noexcept override {
    int count = 0;
    return emGetDeviceCount(&count) == emSuccess
        ? static_cast<c10::DeviceIndex>(count)
        : 0;
  }

  // Streams come in chapter 09. Until then every device has one stream, the
  // default one, and work on it is synchronous.
  c10::Stream getStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, device);
  }

  c10::Stream exchangeStream(c10::Stream stream) const override {
    return c10::Stream(c10::Stream::DEFAULT, stream.device());
  }

  // torch.accelerator.synchronize() and torch.<device>.synchronize() end here.
  void synchronizeDevice(c10::DeviceIndex device_index) const override {
    EMBER_CHECK(emDeviceSynchronize(device_index));
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmberGuardImpl);

} // namespace ember
// ember-book: end device_guard.v1

// ember-book: begin allocator.v1
namespace ember {

// DataPtr keeps a plain function pointer as the deleter. It runs inside
// destructors, so it must not throw: a failed free is reported, not raised.
void deleteDeviceMemory(void* ptr) {
  const emError_t error = emFree(ptr);
  if (error != emSuccess) {
    TORCH_WARN("ember: freeing device memory at ", ptr, " failed: ",
               emGetErrorString(error));
  }
}

struct EmberAllocator final : public c10::Allocator {
  // Allocates on the current device. Code that wants memory on a given
  // device makes it current first with a device guard (PyTorch's storage
  // constructor does; our kernels will).
  c10::DataPtr allocate(size_t nbytes) override {
    int device = 0;
    EMBER_CHECK(emGetDevice(&device));
    void* ptr = nullptr;
    const emError_t error = emMalloc(&ptr, nbytes); // 0 bytes gives nullptr
    if (error == emErrorMemoryAllocation) {
      // Running out of memory is an error programs handle (smaller batch,
      // empty a cache), so raise torch.OutOfMemoryError as CUDA does.
      emMemStats stats{};
      EMBER_CHECK(emMemGetStats(device, &stats));
      TORCH_CHECK_WITH(OutOfMemoryError, false,
                       "ember out of memory: tried to allocate ", nbytes,
                       " bytes on ember device ", device, ", which has ",
                       stats.bytes_in_use, " bytes in use");
    }
    EMBER_CHECK(error);
    // The context is the pointer itself: the deleter needs nothing else.
    return {ptr, ptr, &deleteDeviceMemory,
            c10::Device(c10::DeviceType::PrivateUse1,
                        static_cast<c10::DeviceIndex>(device))};
  }

  // The context is the pointer and the deleter is a plain function, so
  // PyTorch may use raw_allocate()/raw_deallocate() with this allocator.
  c10::DeleterFnPtr raw_deleter() const override {
    return &deleteDeviceMemory;
  }

  // Allocator::clone() copies through this. The default (std::memcpy on
  // the host) would fault on ember memory: the driver must do the copy.
  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    EMBER_CHECK(emMemcpy(dest, src, count, emMemcpyDeviceToDevice));
  }
};

// One allocator for all ember devices: allocate() reads the current device.
// Registered with priority 0 (the default).
static EmberAllocator ember_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &ember_allocator);

} // namespace ember
// ember-book: end allocator.v1
