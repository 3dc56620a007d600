// Pinned host memory: what Tensor.pin_memory() and torch.empty(...,
// pin_memory=True) allocate for ember, plugged into the hooks' slot.
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "runtime/EmberCheck.h"
#include "runtime/EmberHooks.h"
#include "memory/EmberPinned.h"
#include "driver/ember_driver.h"

// ember-book: begin pinned_blocks
#include <ATen/core/CachingHostAllocator.h> // at::CachingHostAllocatorImpl
#include <sys/mman.h> // mmap, munmap

#include "runtime/EmberHooks.h" // the slots: PlugPinnedMemory

namespace ember {

// A real device copies asynchronously only from page-locked host memory:
// the bytes must stay where they are until the copy runs, after the call
// returned. Page-locking is slow (every page is faulted in and locked), so
// PyTorch's CachingHostAllocatorImpl keeps freed blocks for reuse. We give
// it ember's streams and events, and the memory: resident pages
// (MAP_POPULATE faults them all in, the cost a page-locking call pays).

// Which host ranges are pinned blocks (cached ones too): is_pinned() asks
// about any pointer, also one inside a block. Leaked on purpose: tensors
// may be freed after this library's statics.
std::mutex& pinnedMutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<uintptr_t, size_t>& pinnedRanges() { // start -> size
  static auto* ranges = new std::map<uintptr_t, size_t>;
  return *ranges;
}

// The start of the block holding `ptr`, or 0.
uintptr_t pinnedStart(const void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  std::lock_guard<std::mutex> lock(pinnedMutex());
  auto it = pinnedRanges().upper_bound(address);
  if (it == pinnedRanges().begin()) {
    return 0;
  }
  --it;
  return address < it->first + it->second ? it->first : 0;
}

bool isPinnedPtr(const void* ptr) {
  return pinnedStart(ptr) != 0;
}

} // namespace ember
// ember-book: end pinned_blocks

// ember-book: begin pinned_allocator
namespace ember {

// An ember sync event recorded on a stream that used a freed block: the
// block is reused once every such event has completed. Never throws (it
// is made in a tensor's deleter): if the driver cannot record it, we wait
// for the stream instead, and the event is done (0).
class PinnedEvent {
 public:
  explicit PinnedEvent(c10::Stream stream) {
    const int device = stream.device_index();
    if (emSyncEventCreate(device, &event_, emSyncEventDisableTiming) ==
            emSuccess &&
        emSyncEventRecord(event_, device, stream.id()) == emSuccess) {
      return;
    }
    (void)emStreamSynchronize(device, stream.id());
    reset();
  }
  PinnedEvent(PinnedEvent&& other) noexcept
      : event_(std::exchange(other.event_, 0)) {}
  PinnedEvent& operator=(PinnedEvent&& other) noexcept {
    std::swap(event_, other.event_);
    return *this;
  }
  ~PinnedEvent() {
    reset();
  }
  bool done() const {
    int done = 1;
    return event_ == 0 || emSyncEventQuery(event_, &done) != emSuccess ||
        done != 0;
  }

 private:
  void reset() {
    if (event_ != 0) {
      (void)emSyncEventDestroy(event_);
      event_ = 0;
    }
  }
  emSyncEvent_t event_ = 0;
};

// The cache itself is PyTorch's: free lists by power-of-two size, the
// streams each block was used on, events recorded on them when it is freed.
// We supply the runtime calls it leaves to the backend.
struct PinnedCache final
    : at::CachingHostAllocatorImpl<c10::Stream, PinnedEvent> {
  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // Only an ember stream's work can be pending on a block.
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    return stream.device_type() == c10::DeviceType::PrivateUse1 &&
        CachingHostAllocatorImpl::record_event(ptr, ctx, stream);
  }

 private:
  void allocate_host_memory(size_t size, void** ptr) override {
    const auto start = std::chrono::steady_clock::now();
    void* data = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED,
                     "ember: cannot allocate ", size,
                     " bytes of pinned host memory");
    timed(stats_.host_alloc_time, start);
    std::lock_guard<std::mutex> lock(pinnedMutex());
    pinnedRanges()[reinterpret_cast<uintptr_t>(data)] = size;
    *ptr = data;
  }

  void free_block(at::HostBlock<c10::Stream>* block) override {
    const auto start = std::chrono::steady_clock::now();
    {
      std::lock_guard<std::mutex> lock(pinnedMutex());
      pinnedRanges().erase(reinterpret_cast<uintptr_t>(block->ptr_));
    }
    munmap(block->ptr_, block->size_);
    timed(stats_.host_free_time, start);
  }

  // A freed block was used on `stream`: an event marks where its use ends.
  void record_stream(std::optional<std::vector<PinnedEvent>>& events,
                     c10::Stream stream) override {
    events->emplace_back(stream);
  }

  bool query_event(PinnedEvent& event) override {
    return event.done();
  }

  // host_alloc_time, host_free_time: microseconds, as CUDA's.
  void timed(at::DurationStat& stat,
             std::chrono::steady_clock::time_point start) {
    const auto elapsed = std::chrono::steady_clock::now() - start;
    std::lock_guard<std::mutex> lock(stats_.timing_mutex_);
    stat.increase(
        std::chrono::duration_cast<std::chrono::microseconds>(elapsed)
            .count());
  }
};

void freePinned(void* block);
using PinnedAllocator =
    at::CachingHostAllocatorInterface<PinnedCache, &freePinned>;

// Leaked on purpose: pinned tensors may be freed after this library's
// statics, and their deleter comes here.
PinnedAllocator& thePinnedAllocator() {
  static auto* allocator = new PinnedAllocator;
  return *allocator;
}
void freePinned(void* block) {
  thePinnedAllocator().free(block);
}
c10::Allocator* pinnedAllocator() {
  return &thePinnedAllocator();
}

// A non_blocking copy queued on (device, stream) uses the block holding
// `ptr` (maybe inside it): the block is not reused before that copy ends.
void recordPinnedUse(const void* ptr, int device, emStream_t stream) {
  const uintptr_t start = pinnedStart(ptr);
  TORCH_INTERNAL_ASSERT(start != 0, "ember: not pinned memory");
  const c10::Stream used(c10::Stream::UNSAFE,
                         c10::Device(c10::DeviceType::PrivateUse1, device),
                         stream);
  thePinnedAllocator().record_event(reinterpret_cast<void*>(start),
                                    nullptr, used);
}

// PrivateUse1's host allocator while this library is loaded: what
// torch.accelerator.empty_host_cache() empties. The registry keeps a plain
// pointer, so unloading clears it rather than leave it dangling.
struct HostAllocatorSlot {
  HostAllocatorSlot() {
    at::setHostAllocator(c10::DeviceType::PrivateUse1, &thePinnedAllocator());
  }
  ~HostAllocatorSlot() {
    at::setHostAllocator(c10::DeviceType::PrivateUse1, nullptr);
  }
};
static HostAllocatorSlot host_allocator_slot;

// Into the hooks' slot (the stable library's): Tensor.pin_memory() and
// Tensor.is_pinned() reach these through at::PrivateUse1HooksInterface.
static PlugPinnedMemory plug_pinned_memory(&isPinnedPtr, &pinnedAllocator);

} // namespace ember
// ember-book: end pinned_allocator
