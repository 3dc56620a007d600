// Memory history: what the device cache reports to the profiler and to
// torch.ember.memory._record_memory_history, in c10's generic types
// (c10/core/CachingDeviceAllocator.h: TraceEntry, SegmentInfo, BlockInfo),
// the same ones CUDA's caching allocator fills for its snapshots.
#pragma once

// ember-book: begin memory_history_api
#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/ember_driver.h"

namespace ember {

using MemoryAction = c10::CachingDeviceAllocator::TraceEntry::Action;

namespace detail {
// Read on every allocation and free, without a lock: with history off, the
// hooks below cost a load each (inline) and make no call.
extern std::atomic<bool> history_recording;
extern std::atomic<int> history_when; // a RecordContext
} // namespace detail

// The caller's stack, gathered when history asks for one. The cache opens
// one of these before it takes its lock: gathering Python frames needs the
// GIL, and a thread that holds the GIL may be waiting for the cache's lock.
// While it lives, the cache's events on this thread carry its stack.
class MemoryContext {
 public:
  explicit MemoryContext(bool alloc) noexcept {
    using c10::CachingDeviceAllocator::RecordContext;
    const auto when = static_cast<RecordContext>(
        detail::history_when.load(std::memory_order_relaxed));
    if (when != RecordContext::NEVER &&
        (alloc || when == RecordContext::ALL)) {
      begin();
    }
  }
  ~MemoryContext() {
    if (active_) {
      end();
    }
  }
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;

 private:
  void begin() noexcept;
  void end() noexcept;

  std::shared_ptr<c10::GatheredContext> previous_;
  bool active_ = false;
};

// The profiler's half (profile_memory=True) and the history's half.
void reportMemoryToProfiler(MemoryAction action, int device, const void* ptr,
                            size_t size,
                            const c10::CachingDeviceAllocator::DeviceStats& s);
void recordMemoryEvent(MemoryAction action, int device, const void* ptr,
                       size_t size, emStream_t stream,
                       const c10::CachingDeviceAllocator::DeviceStats& s);

// One event of the device cache, called under the cache's lock. `stats` are
// the device's statistics after the event. Allocations and frees are
// reported to the profiler (profile_memory=True); with history on, the event
// joins the device's trace and a block's or segment's stack is kept.
inline void memoryEvent(MemoryAction action, int device, const void* ptr,
                        size_t size, emStream_t stream,
                        const c10::CachingDeviceAllocator::DeviceStats& stats) {
  if (action == MemoryAction::ALLOC || action == MemoryAction::FREE_REQUESTED) {
    reportMemoryToProfiler(action, device, ptr, size, stats);
  }
  if (detail::history_recording.load(std::memory_order_relaxed)) {
    recordMemoryEvent(action, device, ptr, size, stream, stats);
  }
}

// Whether history is being recorded (the walk then adds a "snapshot" entry).
bool memoryHistoryEnabled();

// The stack kept for an allocated block or a segment (nullptr if none).
std::shared_ptr<c10::GatheredContext> blockContext(const void* ptr);
std::shared_ptr<c10::GatheredContext> segmentContext(const void* ptr);

// torch.ember.memory._record_memory_history's arguments, as CUDA's.
void recordMemoryHistory(const std::optional<std::string>& enabled,
                         const std::optional<std::string>& context,
                         const std::string& stacks, size_t max_entries,
                         bool clear_history = false);

// Each device's trace, oldest entry first.
std::vector<std::vector<c10::CachingDeviceAllocator::TraceEntry>>
memoryTraces(int devices);

// The device cache's segments and blocks, in address order
// (EmberCachingAllocator.cpp, after the cache).
std::vector<c10::CachingDeviceAllocator::SegmentInfo> cacheSegments();

} // namespace ember
// ember-book: end memory_history_api
