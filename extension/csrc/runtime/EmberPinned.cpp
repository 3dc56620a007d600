// Pinned host memory: what Tensor.pin_memory() and torch.empty(...,
// pin_memory=True) allocate for ember, plugged into the hooks' slot.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <sys/mman.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/EmberCheck.h"
#include "runtime/EmberHooks.h"
#include "runtime/EmberPinned.h"
#include "driver/ember_driver.h"

// ember-book: begin pinned_memory
#include <ATen/core/CachingHostAllocator.h> // at::HostAllocator
#include <sys/mman.h> // mmap, munmap

#include "runtime/EmberHooks.h" // the slots: PlugPinnedMemory

namespace ember {

// A real device copies asynchronously only from page-locked host memory:
// the bytes must stay where they are until the copy runs, after the call
// returned. The simulated driver can copy any host memory, so "pinned" is
// this allocator's promise: a block is not returned to the OS while a copy
// queued on a stream still reads or writes it.
struct PinnedBlock {
  void* data;
  size_t size;
  std::vector<emSyncEvent_t> uses; // recorded after each queued copy
};

// Tensor.is_pinned() asks about any host pointer, also one inside a block.
// Leaked on purpose: tensors may be freed after this library's statics.
std::mutex& pinnedMutex() {
  static auto* mutex = new std::mutex;
  return *mutex;
}
std::map<uintptr_t, PinnedBlock*>& pinnedBlocks() {
  static auto* blocks = new std::map<uintptr_t, PinnedBlock*>;
  return *blocks;
}
at::HostStats& pinnedStats() { // with pinnedMutex() held
  static auto* stats = new at::HostStats;
  return *stats;
}

PinnedBlock* findPinned(const void* ptr) { // with pinnedMutex() held
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto it = pinnedBlocks().upper_bound(address);
  if (it == pinnedBlocks().begin()) {
    return nullptr;
  }
  --it;
  return address < it->first + it->second->size ? it->second : nullptr;
}

bool isPinnedPtr(const void* ptr) {
  std::lock_guard<std::mutex> lock(pinnedMutex());
  return findPinned(ptr) != nullptr;
}

// A non_blocking copy queued on (device, stream) uses the block holding
// `ptr`: remember an event recorded after it. Events of copies that have
// finished are dropped, so a block reused for many copies keeps few.
void recordPinnedUse(const void* ptr, int device, emStream_t stream) {
  emSyncEvent_t event = 0;
  EMBER_CHECK(emSyncEventCreate(device, &event, emSyncEventDisableTiming));
  EMBER_CHECK(emSyncEventRecord(event, device, stream));
  std::lock_guard<std::mutex> lock(pinnedMutex());
  PinnedBlock* block = findPinned(ptr);
  TORCH_INTERNAL_ASSERT(block != nullptr, "ember: not pinned memory");
  std::vector<emSyncEvent_t> pending{event};
  for (const emSyncEvent_t use : block->uses) {
    int done = 1;
    if (emSyncEventQuery(use, &done) == emSuccess && done == 0) {
      pending.push_back(use);
    } else {
      (void)emSyncEventDestroy(use);
    }
  }
  block->uses = std::move(pending);
}

// The deleter: wait for the copies still queued, then unmap. Never throws.
void freePinned(void* context) {
  auto* block = static_cast<PinnedBlock*>(context);
  {
    std::lock_guard<std::mutex> lock(pinnedMutex());
    pinnedBlocks().erase(reinterpret_cast<uintptr_t>(block->data));
    at::HostStats& stats = pinnedStats();
    stats.active_requests.decrease(1);
    stats.active_bytes.decrease(block->size);
    stats.allocations.decrease(1);
    stats.allocated_bytes.decrease(block->size);
    stats.num_host_free += 1;
  }
  for (const emSyncEvent_t use : block->uses) {
    (void)emSyncEventSynchronize(use);
    (void)emSyncEventDestroy(use);
  }
  munmap(block->data, block->size);
  delete block;
}

// Registered as PrivateUse1's host allocator (at::getHostAllocator), which
// PyTorch's generic code asks for pinned memory, stream uses and stats. It
// caches nothing: a freed block goes back to the OS once its copies finish.
struct PinnedAllocator final : public at::HostAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    if (nbytes == 0) {
      return {nullptr, c10::Device(c10::DeviceType::CPU)};
    }
    // Whole pages of their own, so that no other allocation shares them.
    void* data = mmap(nullptr, nbytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    TORCH_CHECK_WITH(OutOfMemoryError, data != MAP_FAILED,
                     "ember: cannot allocate ", nbytes,
                     " bytes of pinned host memory");
    auto* block = new PinnedBlock{data, nbytes, {}};
    {
      std::lock_guard<std::mutex> lock(pinnedMutex());
      pinnedBlocks()[reinterpret_cast<uintptr_t>(data)] = block;
      at::HostStats& stats = pinnedStats();
      stats.active_requests.increase(1);
      stats.active_bytes.increase(nbytes);
      stats.allocations.increase(1);
      stats.allocated_bytes.increase(nbytes);
      stats.num_host_alloc += 1;
    }
    // A CPU tensor's memory: the host reads it directly.
    return {data, block, &freePinned, c10::Device(c10::DeviceType::CPU)};
  }

  void copy_data(void* dest, const void* src, size_t count) const override {
    std::memcpy(dest, src, count);
  }

  // "This block is used by work queued on `stream`": it is not unmapped
  // before that work has finished (our copy_ kernel records its own uses).
  bool record_event(void* ptr, void* ctx, c10::Stream stream) override {
    if (ctx == nullptr || stream.device_type() != c10::DeviceType::PrivateUse1) {
      return false;
    }
    recordPinnedUse(ptr, stream.device_index(), stream.id());
    return true;
  }

  void empty_cache() override {} // nothing is cached

  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> lock(pinnedMutex());
    return pinnedStats();
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> lock(pinnedMutex());
    for (c10::CachingAllocator::Stat* stat : counters(pinnedStats())) {
      stat->reset_accumulated();
    }
    pinnedStats().num_host_alloc = pinnedStats().num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> lock(pinnedMutex());
    for (c10::CachingAllocator::Stat* stat : counters(pinnedStats())) {
      stat->reset_peak();
    }
  }

 private:
  static std::array<c10::CachingAllocator::Stat*, 4> counters(at::HostStats& s) {
    return {&s.active_requests, &s.active_bytes, &s.allocations,
            &s.allocated_bytes};
  }
};

PinnedAllocator& thePinnedAllocator() {
  static PinnedAllocator allocator;
  return allocator;
}
c10::Allocator* pinnedAllocator() {
  return &thePinnedAllocator();
}

// PrivateUse1's host allocator while this library is loaded. The registry
// keeps a plain pointer, so unloading clears it rather than leave it
// dangling (getHostAllocator then says none is registered).
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
// ember-book: end pinned_memory
