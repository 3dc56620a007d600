// The PrivateUse1 allocator: every ember tensor's storage comes from here.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin allocator
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
// ember-book: end allocator
