// The PrivateUse1 allocator: every ember tensor's storage comes from here.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

#include "EmberCheck.h"
#include "runtime/ember_driver.h"

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
  c10::DataPtr allocate(size_t nbytes) override {
    int device = 0;
    EMBER_CHECK(emGetDevice(&device));
    void* ptr = nullptr;
    EMBER_CHECK(emMalloc(&ptr, nbytes)); // nbytes == 0 gives nullptr
    return {ptr, ptr, &deleteDeviceMemory,
            c10::Device(c10::DeviceType::PrivateUse1,
                        static_cast<c10::DeviceIndex>(device))};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return &deleteDeviceMemory;
  }

  // Used by Storage copies (e.g. clone of a storage): device to device.
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    EMBER_CHECK(emMemcpy(dest, src, count, emMemcpyDeviceToDevice));
  }
};

// One allocator for all ember devices: allocate() reads the current device.
// Registered with priority 0 (the default).
static EmberAllocator ember_allocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, &ember_allocator);

} // namespace ember
// ember-book: end allocator
