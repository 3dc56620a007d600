// Memory history: what the device cache reports to the profiler and to
// torch.ember.memory._record_memory_history, in c10's generic types
// (c10/core/CachingDeviceAllocator.h: TraceEntry, SegmentInfo, BlockInfo),
// the same ones CUDA's caching allocator fills for its snapshots.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/core/CachingDeviceAllocator.h>

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/ember_driver.h"

namespace ember {

using MemoryAction = c10::CachingDeviceAllocator::TraceEntry::Action;

// The caller's stack, gathered when history asks for one. The cache opens
// one of these before it takes its lock: gathering Python frames needs the
// GIL, and a thread that holds the GIL may be waiting for the cache's lock.
// While it lives, the cache's events on this thread carry its stack.
class MemoryContext {
 public:
  explicit MemoryContext(bool alloc) noexcept;
  ~MemoryContext();
  MemoryContext(const MemoryContext&) = delete;
  MemoryContext& operator=(const MemoryContext&) = delete;

 private:
  std::shared_ptr<c10::GatheredContext> previous_;
  bool active_ = false;
};

// One event of the device cache, called under the cache's lock. `stats` are
// the device's statistics after the event. Allocations and frees are
// reported to the profiler (profile_memory=True); with history on, the event
// joins the device's trace and a block's or segment's stack is kept.
void memoryEvent(MemoryAction action, int device, const void* ptr,
                 size_t size, emStream_t stream,
                 const c10::CachingDeviceAllocator::DeviceStats& stats);

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
