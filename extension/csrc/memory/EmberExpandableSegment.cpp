// The driver side of an expandable segment: a reservation
// (emMemAddressReserve), and pages mapped into it chunk by chunk (emMemMap),
// as CUDA's allocator does with cuMemAddressReserve and cuMemMap.
#include "memory/EmberExpandableSegment.h"
#include "runtime/EmberCheck.h"

// ember-book: begin expandable_segment
#include <c10/util/Exception.h>

#include "driver/ember_driver.h"

namespace ember {
namespace {

// Reservations are made on the current device: switch for the call.
class DeviceSwitch {
 public:
  explicit DeviceSwitch(int device) {
    EMBER_CHECK(emGetDevice(&previous_));
    if (previous_ != device) {
      EMBER_CHECK(emSetDevice(device));
    }
  }
  ~DeviceSwitch() {
    (void)emSetDevice(previous_);
  }
  DeviceSwitch(const DeviceSwitch&) = delete;
  DeviceSwitch& operator=(const DeviceSwitch&) = delete;

 private:
  int previous_ = 0;
};

} // namespace

ExpandableSegment::ExpandableSegment(int device, size_t size)
    : device_(device), reserved_(size / kChunk * kChunk) {
  DeviceSwitch on(device);
  void* base = nullptr;
  if (reserved_ > 0 &&
      emMemAddressReserve(&base, reserved_) == emSuccess) {
    base_ = static_cast<char*>(base);
  }
}

ExpandableSegment::~ExpandableSegment() {
  if (base_ == nullptr) {
    return;
  }
  if (mapped_ > 0) {
    (void)emDeviceSynchronize(device_);
    (void)emMemUnmap(base_, mapped_);
  }
  (void)emMemAddressFree(base_);
}

bool ExpandableSegment::grow(size_t bytes) {
  TORCH_INTERNAL_ASSERT(bytes % kChunk == 0);
  if (base_ == nullptr || bytes > reserved_ - mapped_) {
    return false;
  }
  size_t done = 0;
  for (; done < bytes; done += kChunk) {
    const emError_t error = emMemMap(end() + done, kChunk);
    if (error == emErrorMemoryAllocation) {
      break;
    }
    EMBER_CHECK(error);
  }
  if (done < bytes) { // the device is full: undo this call's chunks
    if (done > 0) {
      EMBER_CHECK(emMemUnmap(end(), done));
    }
    return false;
  }
  mapped_ += bytes;
  return true;
}

bool ExpandableSegment::shrink(size_t bytes) {
  TORCH_INTERNAL_ASSERT(bytes % kChunk == 0 && bytes <= mapped_);
  if (bytes == 0) {
    return true;
  }
  EMBER_CHECK(emDeviceSynchronize(device_));
  const emError_t error = emMemUnmap(end() - bytes, bytes);
  if (error == emErrorInvalidValue) {
    return false; // still in use (by a graph): stays mapped and cached
  }
  EMBER_CHECK(error);
  mapped_ -= bytes;
  return true;
}

} // namespace ember
// ember-book: end expandable_segment
