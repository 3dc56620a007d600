// The PrivateUse1 allocator: every ember tensor's storage comes from here,
// through the device cache (EmberCachingAllocator.cpp).
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdio>
#include <string>
#include <utility>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin allocator
#include <c10/core/CachingDeviceAllocator.h> // c10::DeviceAllocator

namespace ember {

// The device cache (device_cache) and the fork check (fork_guard).
void* cacheAllocate(size_t nbytes, int device, emStream_t stream);
void cacheFree(void* ptr) noexcept;
void cacheRecordStream(void* ptr, c10::Stream stream);
void cacheEmpty();
c10::CachingDeviceAllocator::DeviceStats cacheStats(int device);
void cacheResetPeak(int device);
void cacheResetAccumulated(int device);
void cacheCountOom(int device);
void checkNotForked();
bool inBadFork();
// A graph's pool while it captures on that stream, else the stream (graph_pool).
emStream_t allocationStream(int device, emStream_t stream);

// The deleter hands the block back to the cache; it runs in destructors, so
// it never throws. In a forked child it does nothing: the cache's lock may
// have been held, at the fork, by a thread the child does not have.
void deleteCachedMemory(void* ptr) {
  if (!inBadFork()) {
    cacheFree(ptr);
  }
}

// 1536 -> "1.50 KiB", as CUDA's messages print sizes.
std::string formatBytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) {
    return std::to_string(bytes) + " bytes";
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

// c10::DeviceAllocator is what torch.accelerator's memory functions ask for:
// c10::getDeviceAllocator(PrivateUse1) casts the registered allocator to it.
struct EmberAllocator final : public c10::DeviceAllocator {
  // On the current device and its current stream: a block freed later goes
  // back to that stream's cache, where work queued on the stream is ordered
  // before any reuse.
  c10::DataPtr allocate(size_t nbytes) override {
    checkNotForked();
    int device = 0;
    EMBER_CHECK(emGetDevice(&device));
    const c10::Device where(c10::DeviceType::PrivateUse1,
                            static_cast<c10::DeviceIndex>(device));
    if (nbytes == 0) {
      return {nullptr, nullptr, &deleteCachedMemory, where};
    }
    emStream_t stream = 0;
    EMBER_CHECK(emGetStream(device, &stream));
    void* ptr = cacheAllocate(nbytes, device, allocationStream(device, stream));
    if (ptr == nullptr) {
      raiseOutOfMemory(nbytes, device); // the cache already emptied itself
    }
    return {ptr, ptr, &deleteCachedMemory, where};
  }

  // Running out of memory is an error programs handle (a smaller batch, a
  // cache to empty), so it is torch.OutOfMemoryError, worded as CUDA's.
  [[noreturn]] void raiseOutOfMemory(size_t nbytes, int device) {
    cacheCountOom(device);
    size_t free = 0, total = 0;
    EMBER_CHECK(emMemGetInfo(device, &free, &total));
    const auto stats = cacheStats(device);
    const auto all =
        static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
    const size_t allocated = stats.allocated_bytes[all].current;
    const size_t reserved = stats.reserved_bytes[all].current;
    TORCH_CHECK_WITH(
        OutOfMemoryError, false, "ember out of memory. Tried to allocate ",
        formatBytes(nbytes), ". ember device ", device, " (",
        c10::Device(c10::DeviceType::PrivateUse1,
                    static_cast<c10::DeviceIndex>(device)),
        ") has a total capacity of ", formatBytes(total), " of which ",
        formatBytes(free), " is free. Of the allocated memory ",
        formatBytes(allocated), " is allocated by PyTorch, and ",
        formatBytes(reserved - allocated),
        " is reserved by PyTorch but unallocated. The capacity is set by "
        "EMBER_DEVICE_MEMORY_BYTES.");
  }

  // The context is the pointer and the deleter a plain function, so
  // raw_allocate()/raw_deallocate() work with this allocator.
  c10::DeleterFnPtr raw_deleter() const override {
    return &deleteCachedMemory;
  }

  void copy_data(void* dest, const void* src,
                 std::size_t count) const override {
    EMBER_CHECK(emMemcpy(dest, src, count, emMemcpyDeviceToDevice));
  }

  bool initialized() override {
    return true; // the driver needs no setup
  }

  // A graph's pool is a key of the one cache (graph_pool), so any id empties
  // the free segments of every pool. A segment a graph's kernels used stays
  // reserved in the driver until the graph is reset.
  void emptyCache(c10::MempoolId_t /*mempool_id*/) override {
    checkNotForked();
    cacheEmpty();
  }

  // Tensor.record_stream (through the device guard): memory used on
  // `stream` too. Memory this allocator did not hand out is not its business.
  void recordStream(const c10::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() == &deleteCachedMemory && ptr.get() != nullptr) {
      cacheRecordStream(ptr.get(), stream);
    }
  }

  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(
      c10::DeviceIndex device) override {
    checkDevice(device);
    return cacheStats(device);
  }

  void resetAccumulatedStats(c10::DeviceIndex device) override {
    checkDevice(device);
    cacheResetAccumulated(device);
  }

  void resetPeakStats(c10::DeviceIndex device) override {
    checkDevice(device);
    cacheResetPeak(device);
  }

  // torch.accelerator.get_memory_info: (free, total) as the driver sees it.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    checkNotForked();
    size_t free = 0, total = 0;
    EMBER_CHECK(emMemGetInfo(device, &free, &total)); // checks the index
    return {free, total};
  }

 private:
  static void checkDevice(c10::DeviceIndex device) {
    checkNotForked();
    size_t free = 0, total = 0;
    EMBER_CHECK(emMemGetInfo(device, &free, &total)); // checks the index
  }
};

// One allocator for all ember devices, leaked: deleters of tensors that
// outlive this library's statics still reach the cache, never a dead object.
static auto* ember_allocator = new EmberAllocator;
REGISTER_ALLOCATOR(c10::DeviceType::PrivateUse1, ember_allocator);

// torch.accelerator asks only the process's accelerator for its allocator,
// and PrivateUse1 is none until a name is registered (chapter 13 renames
// it). Whoever must empty the cache anyway (book.build() before it replaces
// a backend) calls this operator; boxed, as it takes and returns nothing.
void emptyCacheKernel(const c10::OperatorHandle&, torch::jit::Stack*) {
  ember_allocator->emptyCache({0, 0});
}

} // namespace ember

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("_empty_cache() -> ()",
        torch::CppFunction::makeFromBoxedFunction<&ember::emptyCacheKernel>());
}
// ember-book: end allocator
