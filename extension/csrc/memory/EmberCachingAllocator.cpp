// The device cache behind ember's allocator: freed blocks are kept and handed
// out again without a driver call, as CUDA's caching allocator does.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Stream.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "memory/EmberAllocatorSettings.h"
#include "runtime/EmberCheck.h"
#include "memory/EmberExpandableSegment.h"
#include "memory/EmberMemoryHistory.h"
#include "driver/ember_driver.h"

// ember-book: begin device_cache
#include <c10/core/CachingDeviceAllocator.h> // DeviceStats, StatArray
#include <c10/util/flat_hash_map.h>             // ska::flat_hash_map

namespace ember {

using c10::CachingDeviceAllocator::DeviceStats;
using c10::CachingDeviceAllocator::StatArray;
using c10::CachingDeviceAllocator::StatType;

// Sizes. Every block is a multiple of 512 bytes. Requests below 1 MiB are
// "small": they share 2 MiB segments (one driver allocation each), so a burst
// of small tensors costs one driver call. Larger ones get a segment of their
// own, rounded to 2 MiB, whose unused tail can serve the next request.
constexpr size_t kBlockRound = 512;
constexpr size_t kSmallRequest = size_t{1} << 20;
constexpr size_t kSegmentRound = size_t{2} << 20;
// A large block is split only if more than 1 MiB would remain (CUDA's rule):
// a smaller tail is not worth a block of its own, and a request that just
// fits keeps being served whole, with no split and merge on every reuse.
constexpr size_t kMinLargeRemainder = size_t{1} << 20;
// The driver's devices (2) fit, with room: indexed, not hashed.
constexpr int kMaxDevices = 16;

// A block is a piece of a segment. The blocks of one segment form a list
// in address order, so that a freed block merges with free neighbours.
struct Block {
  int device;
  emStream_t stream; // the stream current when it was allocated
  bool small;        // which pool
  size_t size;       // multiple of kBlockRound
  size_t requested = 0;
  char* ptr;
  bool allocated = false;
  Block* prev = nullptr; // neighbours in the segment
  Block* next = nullptr;
  // record_stream: other streams that used the block. On free, one event is
  // recorded on each; the block is reused only when all have completed.
  std::set<std::pair<int, emStream_t>> stream_uses;
  int pending_events = 0;
  ExpandableSegment* segment = nullptr; // the expandable one it lies in
  uint64_t freed_at = 0; // when last cached: its age for garbage collection
};

// Free blocks are found by (stream, size): the smallest block of the same
// stream that is large enough. A block freed on one stream is never handed
// to another: work queued there may still use it.
struct BySizeOnStream {
  bool operator()(const Block* a, const Block* b) const {
    return std::tie(a->stream, a->size, a->ptr) <
        std::tie(b->stream, b->size, b->ptr);
  }
};
using FreeBlocks = std::set<Block*, BySizeOnStream>;

struct DeviceCache {
  FreeBlocks small_free, large_free;
  std::vector<std::pair<emSyncEvent_t, Block*>> pending; // record_stream
  DeviceStats stats;
  // expandable_segments: the large blocks of each stream, in one segment.
  std::map<emStream_t, std::unique_ptr<ExpandableSegment>> expandable;
};

// Stats are kept for all blocks and for the pool the block belongs to.
void updateStat(StatArray& stat, bool small, int64_t amount) {
  for (const auto type :
       {StatType::AGGREGATE, small ? StatType::SMALL_POOL : StatType::LARGE_POOL}) {
    auto& s = stat[static_cast<size_t>(type)];
    amount >= 0 ? s.increase(amount) : s.decrease(-amount);
  }
}

class Cache {
 public:
  // PYTORCH_ALLOC_CONF is read once, when the cache is first used.
  Cache() : settings_(readAllocatorSettings()) {
    for (DeviceCache& cache : devices_) {
      cache.stats.max_split_size =
          static_cast<int64_t>(settings_.max_split_size);
    }
  }

  // Returns a block of at least `nbytes` on (device, stream), or nullptr if
  // the driver has no room even after the cache gave back what it holds.
  Block* malloc(size_t nbytes, int device, emStream_t stream) {
    TORCH_CHECK(device >= 0 && device < kMaxDevices, "ember: device ", device,
                " is beyond the device cache's ", kMaxDevices, " devices");
    MemoryContext context(/*alloc=*/true); // before the lock (history)
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceCache& cache = devices_[device];
    if (!cache.pending.empty()) {
      processEvents(cache);
    }
    const size_t size = roundSize(nbytes);
    const bool small = size < kSmallRequest;
    Block key{device, stream, small, size, 0, nullptr};
    FreeBlocks& pool = small ? cache.small_free : cache.large_free;
    Block* block = nullptr;
    auto it = pool.lower_bound(&key);
    if (it != pool.end() && (*it)->stream == stream &&
        (small || (*it)->segment != nullptr ||
         settings_.cachedBlockServes((*it)->size, size))) {
      block = *it; // a hit: no driver call
      eraseFree(cache, block);
    } else {
      block = newSegment(cache, device, stream, small, size);
      if (block == nullptr) {
        memoryEvent(MemoryAction::OOM, device, nullptr, nbytes, stream,
                    cache.stats);
        return nullptr;
      }
    }
    block = split(cache, block, size);
    block->allocated = true;
    block->requested = nbytes;
    active_.emplace(block->ptr, block);
    updateStat(cache.stats.allocation, small, 1);
    updateStat(cache.stats.allocated_bytes, small, block->size);
    updateStat(cache.stats.active, small, 1);
    updateStat(cache.stats.active_bytes, small, block->size);
    updateStat(cache.stats.requested_bytes, small, nbytes);
    if (settings_.isOversize(block->size)) {
      cache.stats.oversize_allocations.increase(1);
    }
    memoryEvent(MemoryAction::ALLOC, device, block->ptr, block->size, stream,
                cache.stats);
    return block;
  }

  // The deleter's half: must not throw.
  void free(void* ptr) noexcept {
    MemoryContext context(/*alloc=*/false);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = active_.find(ptr);
    if (it == active_.end()) {
      return; // not ours (the caller checked the deleter): nothing to do
    }
    Block* block = it->second;
    active_.erase(it);
    DeviceCache& cache = devices_[block->device];
    block->allocated = false;
    updateStat(cache.stats.allocation, block->small, -1);
    updateStat(cache.stats.allocated_bytes, block->small, -int64_t(block->size));
    updateStat(cache.stats.requested_bytes, block->small,
               -int64_t(block->requested));
    if (settings_.isOversize(block->size)) {
      cache.stats.oversize_allocations.decrease(1);
    }
    memoryEvent(MemoryAction::FREE_REQUESTED, block->device, block->ptr,
                block->size, block->stream, cache.stats);
    if (!block->stream_uses.empty()) {
      // Another stream may still have work queued on this memory: mark the
      // point it has reached, and keep the block until it gets there.
      for (const auto& [device, stream] : block->stream_uses) {
        emSyncEvent_t event = 0;
        if (emSyncEventCreate(device, &event, emSyncEventDisableTiming) !=
                emSuccess ||
            emSyncEventRecord(event, device, stream) != emSuccess) {
          (void)emDeviceSynchronize(device); // cannot mark: wait instead
          if (event != 0) {
            (void)emSyncEventDestroy(event);
          }
          continue;
        }
        cache.pending.emplace_back(event, block);
        ++block->pending_events;
      }
      block->stream_uses.clear();
      if (block->pending_events > 0) {
        return; // still active: released by processEvents
      }
    }
    release(cache, block);
  }

  void recordStream(void* ptr, c10::Stream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = active_.find(ptr);
    if (it == active_.end()) {
      return; // memory of a view's base, or not from this allocator
    }
    Block* block = it->second;
    if (stream.device_index() == block->device && stream.id() == block->stream) {
      return; // its own stream: stream order already protects it
    }
    block->stream_uses.emplace(stream.device_index(), stream.id());
  }

  // Gives every cached segment that is wholly free back to the driver, after
  // waiting for the record_stream events still pending.
  void emptyCache() {
    MemoryContext context(/*alloc=*/false);
    std::lock_guard<std::mutex> lock(mutex_);
    for (DeviceCache& cache : devices_) {
      for (const auto& [event, block] : cache.pending) {
        (void)emSyncEventSynchronize(event);
      }
      processEvents(cache);
      releaseSegments(cache);
    }
  }

  DeviceStats stats(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    return devices_[device].stats;
  }

  void resetPeak(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& s = devices_[device].stats;
    for (StatArray* stat : statArrays(s)) {
      for (auto& one : *stat) {
        one.reset_peak();
      }
    }
  }

  void resetAccumulated(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    DeviceStats& s = devices_[device].stats;
    for (StatArray* stat : statArrays(s)) {
      for (auto& one : *stat) {
        one.reset_accumulated();
      }
    }
    s.num_alloc_retries = s.num_ooms = 0;
    s.num_device_alloc = s.num_device_free = 0;
  }

  // The allocator counts the requests it could not satisfy.
  void countOom(int device) {
    std::lock_guard<std::mutex> lock(mutex_);
    ++devices_[device].stats.num_ooms;
  }

 private:
  static size_t roundSize(size_t nbytes) {
    return std::max<size_t>(1, (nbytes + kBlockRound - 1) / kBlockRound) *
        kBlockRound;
  }

  static std::vector<StatArray*> statArrays(DeviceStats& s) {
    return {&s.allocation, &s.segment, &s.active, &s.inactive_split,
            &s.allocated_bytes, &s.reserved_bytes, &s.active_bytes,
            &s.inactive_split_bytes, &s.requested_bytes};
  }

  // A new segment from the driver. If it is full, the cache returns its free
  // segments (on every stream) and tries once more.
  Block* newSegment(DeviceCache& cache, int device, emStream_t stream,
                    bool small, size_t size) {
    const size_t bytes = small
        ? kSegmentRound
        : (size + kSegmentRound - 1) / kSegmentRound * kSegmentRound;
    if (auto* segment = expandableFor(cache, device, stream, small)) {
      return growExpandable(cache, *segment, stream, size);
    }
    if (settings_.garbage_collection_threshold > 0) {
      collectGarbage(cache, device, bytes);
    }
    void* ptr = nullptr;
    emError_t error = emMalloc(&ptr, bytes);
    if (error == emErrorMemoryAllocation) {
      ++cache.stats.num_alloc_retries;
      releaseSegments(cache);
      error = emMalloc(&ptr, bytes);
    }
    if (error == emErrorMemoryAllocation) {
      return nullptr;
    }
    EMBER_CHECK(error);
    ++cache.stats.num_device_alloc;
    updateStat(cache.stats.segment, small, 1);
    updateStat(cache.stats.reserved_bytes, small, bytes);
    if (settings_.isOversize(bytes)) {
      cache.stats.oversize_segments.increase(1);
    }
    memoryEvent(MemoryAction::SEGMENT_ALLOC, device, ptr, bytes, stream,
                cache.stats);
    return newBlock(Block{device, stream, small, bytes, 0, static_cast<char*>(ptr)});
  }

  // Cuts `size` bytes off the front of a free block; the rest stays cached.
  Block* split(DeviceCache& cache, Block* block, size_t size) {
    const size_t rest = block->size - size;
    const bool whole = block->small
        ? rest < kBlockRound
        : rest <= kMinLargeRemainder ||
            (block->segment == nullptr && settings_.isOversize(size));
    if (whole) {
      return block; // too little to keep apart: the block is used whole
    }
    Block* remainder = newBlock(Block{block->device, block->stream, block->small,
                                      rest, 0, block->ptr + size});
    remainder->segment = block->segment;
    if (block->segment != nullptr && block->segment->last_block == block) {
      block->segment->last_block = remainder;
    }
    remainder->prev = block;
    remainder->next = block->next;
    if (block->next != nullptr) {
      block->next->prev = remainder;
    }
    block->next = remainder;
    block->size = size;
    insertFree(cache, remainder);
    return block;
  }

  // A block nobody uses any more: merge it with free neighbours, cache it.
  void release(DeviceCache& cache, Block* block) {
    updateStat(cache.stats.active, block->small, -1);
    updateStat(cache.stats.active_bytes, block->small, -int64_t(block->size));
    memoryEvent(MemoryAction::FREE_COMPLETED, block->device, block->ptr,
                block->size, block->stream, cache.stats);
    for (Block* neighbour : {block->prev, block->next}) {
      if (neighbour == nullptr || neighbour->allocated ||
          neighbour->pending_events > 0) {
        continue;
      }
      eraseFree(cache, neighbour);
      if (neighbour == block->prev) {
        block->ptr = neighbour->ptr;
        block->prev = neighbour->prev;
        if (block->prev != nullptr) {
          block->prev->next = block;
        }
      } else {
        if (block->segment != nullptr &&
            block->segment->last_block == neighbour) {
          block->segment->last_block = block;
        }
        block->next = neighbour->next;
        if (block->next != nullptr) {
          block->next->prev = block;
        }
      }
      block->size += neighbour->size;
      deleteBlock(neighbour);
    }
    insertFree(cache, block);
  }

  // A free block with a neighbour in its segment is an "inactive split":
  // cached, but not returnable to the driver on its own.
  void insertFree(DeviceCache& cache, Block* block) {
    (block->small ? cache.small_free : cache.large_free).insert(block);
    block->freed_at = ++free_clock_;
    if (block->prev != nullptr || block->next != nullptr) {
      updateStat(cache.stats.inactive_split, block->small, 1);
      updateStat(cache.stats.inactive_split_bytes, block->small, block->size);
    }
  }

  void eraseFree(DeviceCache& cache, Block* block) {
    (block->small ? cache.small_free : cache.large_free).erase(block);
    if (block->prev != nullptr || block->next != nullptr) {
      updateStat(cache.stats.inactive_split, block->small, -1);
      updateStat(cache.stats.inactive_split_bytes, block->small,
                 -int64_t(block->size));
    }
  }

  // Blocks freed after record_stream: release those whose streams have
  // reached the events recorded at free time.
  void processEvents(DeviceCache& cache) {
    auto& pending = cache.pending;
    for (size_t i = 0; i < pending.size();) {
      int done = 1;
      (void)emSyncEventQuery(pending[i].first, &done);
      if (done == 0) {
        ++i;
        continue;
      }
      (void)emSyncEventDestroy(pending[i].first);
      Block* block = pending[i].second;
      pending[i] = pending.back();
      pending.pop_back();
      if (--block->pending_events == 0) {
        release(cache, block);
      }
    }
  }

  // Every whole free segment goes back to the driver (only those cached
  // before `freed_before`, for garbage collection), and the free ends of
  // expandable segments are unmapped.
  void releaseSegments(DeviceCache& cache,
                       uint64_t freed_before = UINT64_MAX) {
    for (FreeBlocks* pool : {&cache.small_free, &cache.large_free}) {
      for (auto it = pool->begin(); it != pool->end();) {
        Block* block = *it;
        if (block->prev != nullptr || block->next != nullptr ||
            block->segment != nullptr || block->freed_at >= freed_before) {
          ++it;
          continue;
        }
        it = pool->erase(it);
        (void)emFree(block->ptr);
        ++cache.stats.num_device_free;
        if (settings_.isOversize(block->size)) {
          cache.stats.oversize_segments.decrease(1);
        }
        updateStat(cache.stats.segment, block->small, -1);
        updateStat(cache.stats.reserved_bytes, block->small,
                   -int64_t(block->size));
        memoryEvent(MemoryAction::SEGMENT_FREE, block->device, block->ptr,
                    block->size, block->stream, cache.stats);
        deleteBlock(block);
      }
    }
    shrinkExpandable(cache);
  }

  // expandable_segments: the stream's segment (reserved on first use, as
  // large as the device), or nullptr for small blocks, when disabled, or
  // when the driver has no address space left (then: plain segments).
  ExpandableSegment* expandableFor(DeviceCache& cache, int device,
                                   emStream_t stream, bool small) {
    if (small || !settings_.expandable_segments) {
      return nullptr;
    }
    auto& segment = cache.expandable[stream];
    if (segment == nullptr) {
      size_t free = 0, total = 0;
      EMBER_CHECK(emMemGetInfo(device, &free, &total));
      segment = std::make_unique<ExpandableSegment>(device, total);
    }
    return segment->valid() ? segment.get() : nullptr;
  }

  // Grows the segment at its end by whole chunks, enough for `size` bytes
  // together with its last block if that is free. Returns that block,
  // grown (out of the free pool), or a new last block; nullptr if the
  // device is full even after the cache gave back what it holds.
  Block* growExpandable(DeviceCache& cache, ExpandableSegment& segment,
                        emStream_t stream, size_t size) {
    constexpr size_t kChunk = ExpandableSegment::kChunk;
    for (int attempt = 0; attempt < 2; ++attempt) {
      auto* last = static_cast<Block*>(segment.last_block);
      const bool extend =
          last != nullptr && !last->allocated && last->pending_events == 0;
      const size_t have = extend ? last->size : 0;
      const size_t need = size > have ? size - have : 0;
      const size_t grow = (need + kChunk - 1) / kChunk * kChunk;
      const bool was_empty = segment.mapped() == 0;
      char* at = segment.end();
      if (!segment.grow(grow)) {
        if (attempt == 0) {
          ++cache.stats.num_alloc_retries;
          releaseSegments(cache);
        }
        continue;
      }
      ++cache.stats.num_device_alloc;
      if (was_empty) {
        updateStat(cache.stats.segment, false, 1);
      }
      updateStat(cache.stats.reserved_bytes, false, grow);
      memoryEvent(MemoryAction::SEGMENT_MAP, segment.device(), at, grow,
                  stream, cache.stats);
      if (extend) {
        eraseFree(cache, last);
        last->size += grow;
        return last;
      }
      Block* block =
          newBlock(Block{segment.device(), stream, false, grow, 0, at});
      block->segment = &segment;
      block->prev = last;
      if (last != nullptr) {
        last->next = block;
      }
      segment.last_block = block;
      return block;
    }
    return nullptr;
  }

  // Unmaps the free whole chunks at the end of every expandable segment.
  void shrinkExpandable(DeviceCache& cache) {
    constexpr size_t kChunk = ExpandableSegment::kChunk;
    for (auto& [stream, segment] : cache.expandable) {
      auto* last = static_cast<Block*>(segment->last_block);
      if (last == nullptr || last->allocated || last->pending_events > 0) {
        continue;
      }
      // The segment's end is chunk-aligned: keep up to a chunk boundary.
      const size_t offset = last->ptr - segment->base();
      const size_t keep = (offset + kChunk - 1) / kChunk * kChunk - offset;
      if (keep >= last->size) {
        continue;
      }
      const size_t bytes = last->size - keep;
      if (!segment->shrink(bytes)) { // first: it may throw
        continue;
      }
      eraseFree(cache, last);
      ++cache.stats.num_device_free;
      updateStat(cache.stats.reserved_bytes, false, -int64_t(bytes));
      memoryEvent(MemoryAction::SEGMENT_UNMAP, segment->device(),
                  segment->end(), bytes, stream, cache.stats);
      if (segment->mapped() == 0) {
        updateStat(cache.stats.segment, false, -1);
      }
      if (keep > 0) {
        last->size = keep;
        insertFree(cache, last);
        continue;
      }
      segment->last_block = last->prev;
      if (last->prev != nullptr) {
        last->prev->next = nullptr;
      }
      deleteBlock(last);
    }
  }

  // garbage_collection_threshold (CUDA's rule, simplified): when reserving
  // `bytes` more would take the cache past that fraction of the device's
  // capacity, whole free segments go back to the driver first, those
  // cached longest ago first, until it would not (or none is left).
  void collectGarbage(DeviceCache& cache, int device, size_t bytes) {
    size_t free = 0, total = 0;
    EMBER_CHECK(emMemGetInfo(device, &free, &total));
    const auto limit = static_cast<size_t>(
        settings_.garbage_collection_threshold * static_cast<double>(total));
    const auto all = static_cast<size_t>(StatType::AGGREGATE);
    size_t reserved = cache.stats.reserved_bytes[all].current;
    if (reserved + bytes <= limit) {
      return;
    }
    std::vector<const Block*> whole;
    for (const FreeBlocks* pool : {&cache.small_free, &cache.large_free}) {
      for (const Block* block : *pool) {
        if (block->prev == nullptr && block->next == nullptr &&
            block->segment == nullptr) {
          whole.push_back(block);
        }
      }
    }
    std::sort(whole.begin(), whole.end(), [](const Block* a, const Block* b) {
      return a->freed_at < b->freed_at;
    });
    uint64_t freed_before = 0; // release those cached before this
    for (const Block* block : whole) {
      if (reserved + bytes <= limit) {
        break;
      }
      reserved -= block->size;
      freed_before = block->freed_at + 1;
    }
    if (freed_before > 0) {
      releaseSegments(cache, freed_before);
    }
  }

  // Blocks are made and dropped on every split and merge: keep the
  // dropped ones for the next split instead of going to the heap.
  Block* newBlock(Block value) {
    if (spare_.empty()) {
      return new Block(std::move(value));
    }
    Block* block = spare_.back();
    spare_.pop_back();
    *block = std::move(value);
    return block;
  }

  void deleteBlock(Block* block) {
    spare_.push_back(block);
  }

  std::mutex mutex_;
  std::array<DeviceCache, kMaxDevices> devices_;
  ska::flat_hash_map<void*, Block*> active_; // allocated blocks by address
  std::vector<Block*> spare_;
  const AllocatorSettings settings_;
  uint64_t free_clock_ = 0; // counts insertFree calls: blocks' ages
  friend struct CacheWalk; // the snapshot's read-only walk (memory_history)
};

// Leaked on purpose: tensors may be freed after this library's statics.
Cache& deviceCache() {
  static auto* cache = new Cache;
  return *cache;
}

// What the allocator calls (allocator).
void* cacheAllocate(size_t nbytes, int device, emStream_t stream) {
  Block* block = deviceCache().malloc(nbytes, device, stream);
  return block == nullptr ? nullptr : block->ptr;
}
void cacheFree(void* ptr) noexcept {
  deviceCache().free(ptr);
}
void cacheRecordStream(void* ptr, c10::Stream stream) {
  deviceCache().recordStream(ptr, stream);
}
void cacheEmpty() {
  deviceCache().emptyCache();
}
DeviceStats cacheStats(int device) {
  return deviceCache().stats(device);
}
void cacheResetPeak(int device) {
  deviceCache().resetPeak(device);
}
void cacheResetAccumulated(int device) {
  deviceCache().resetAccumulated(device);
}
void cacheCountOom(int device) {
  deviceCache().countOom(device);
}

} // namespace ember
// ember-book: end device_cache

// ember-book: begin cache_walk
namespace ember {

// The snapshot (memory_history): every segment of the cache with its blocks
// in address order, read under the cache's lock. The cache keeps no list of
// segments: a segment is the chain of blocks from one driver allocation, so
// the walk starts from every block it knows, live, cached or pending, and
// follows `prev` to the segment's first block.
struct CacheWalk {
  static std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments(
      Cache& c) {
    std::lock_guard<std::mutex> lock(c.mutex_);
    std::map<std::pair<int, const char*>, const Block*> heads;
    auto add = [&](const Block* block) {
      while (block->prev != nullptr) {
        block = block->prev;
      }
      heads.emplace(std::make_pair(block->device, block->ptr), block);
    };
    for (const auto& [ptr, block] : c.active_) {
      add(block);
    }
    for (DeviceCache& cache : c.devices_) {
      for (const FreeBlocks* pool : {&cache.small_free, &cache.large_free}) {
        for (const Block* block : *pool) {
          add(block);
        }
      }
      for (const auto& [event, block] : cache.pending) {
        add(block);
      }
    }
    std::vector<c10::CachingDeviceAllocator::SegmentInfo> out;
    for (const auto& [key, head] : heads) {
      out.push_back(segment(head));
    }
    int devices = 0;
    if (memoryHistoryEnabled() && emGetDeviceCount(&devices) == emSuccess) {
      // Marks the snapshot in each trace: size is the active memory.
      const auto all = static_cast<size_t>(StatType::AGGREGATE);
      for (int d = 0; d < devices && d < kMaxDevices; ++d) {
        const DeviceStats& stats = c.devices_[d].stats;
        memoryEvent(MemoryAction::SNAPSHOT, d, nullptr,
                    stats.active_bytes[all].current, 0, stats);
      }
    }
    return out;
  }

  static c10::CachingDeviceAllocator::SegmentInfo segment(const Block* head) {
    c10::CachingDeviceAllocator::SegmentInfo info;
    info.device = static_cast<c10::DeviceIndex>(head->device);
    info.address = reinterpret_cast<size_t>(head->ptr);
    info.is_large = !head->small;
    info.is_expandable = head->segment != nullptr;
    if (head->stream >= 0) {
      info.stream = reinterpret_cast<void*>(head->stream);
    } else { // a graph's pool (EmberGraph.cpp): no stream of its own
      const auto pool = static_cast<c10::CaptureId_t>(-head->stream);
      info.owner_private_pool_id = {pool, 0};
    }
    info.context_when_allocated = segmentContext(head->ptr);
    for (const Block* b = head; b != nullptr; b = b->next) {
      c10::CachingDeviceAllocator::BlockInfo block;
      block.size = b->size;
      block.allocated = b->allocated;
      block.active = b->allocated || b->pending_events > 0;
      if (block.active) {
        block.requested_size = b->requested;
        block.context_when_allocated = blockContext(b->ptr);
        info.active_size += b->size;
      }
      if (b->allocated) {
        info.allocated_size += b->size;
        info.requested_size += b->requested;
      }
      info.total_size += b->size;
      info.blocks.push_back(std::move(block));
    }
    return info;
  }
};

std::vector<c10::CachingDeviceAllocator::SegmentInfo> cacheSegments() {
  return CacheWalk::segments(deviceCache());
}

} // namespace ember
// ember-book: end cache_walk
