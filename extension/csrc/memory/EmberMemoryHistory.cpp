// Memory history and the profiler's memory events, fed by the device cache
// (EmberCachingAllocator.cpp): the cache calls memoryEvent at each
// allocation, free, segment and out-of-memory error, and opens a
// MemoryContext before its lock. What is kept follows CUDA's
// _record_memory_history: a ring buffer of trace entries per device, and
// the stack that allocated each live block and segment.
#include "memory/EmberMemoryHistory.h"

// ember-book: begin memory_history
#include <Python.h>
#include <c10/util/ApproximateClock.h>
#include <c10/util/Exception.h>
#include <c10/util/flat_hash_map.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/profiler/unwind/unwind.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

namespace ember {

namespace detail {
std::atomic<bool> history_recording{false};
std::atomic<int> history_when{0};
} // namespace detail

namespace {

using c10::CachingDeviceAllocator::RecordContext;
using c10::CachingDeviceAllocator::StatType;
using c10::CachingDeviceAllocator::TraceEntry;
using Context = std::shared_ptr<c10::GatheredContext>;

constexpr auto kAggregate = static_cast<size_t>(StatType::AGGREGATE);

// The stack of the cache call running on this thread (MemoryContext).
thread_local Context current_context;

// One device's trace: the last `max_entries` entries, oldest overwritten.
struct Ring {
  std::vector<TraceEntry> entries;
  size_t next = 0; // the oldest entry once the ring is full

  void push(TraceEntry entry, size_t max_entries) {
    if (entries.size() < max_entries) {
      entries.push_back(std::move(entry));
      return;
    }
    entries[next] = std::move(entry);
    next = (next + 1) % entries.size();
  }

  std::vector<TraceEntry> inOrder() const {
    std::vector<TraceEntry> out(entries.begin() + next, entries.end());
    out.insert(out.end(), entries.begin(), entries.begin() + next);
    return out;
  }
};

struct History {
  std::atomic<bool> cpp{false}; // gather C++ frames too

  std::mutex mutex; // the rest; taken inside the cache's lock, never around
  size_t max_entries = 1;
  std::vector<Ring> traces; // by device
  ska::flat_hash_map<const void*, Context> blocks, segments;
};

// Leaked on purpose: the cache reports frees after this library's statics.
History& history() {
  static auto* h = new History;
  return *h;
}

RecordContext recordWhen() {
  return static_cast<RecordContext>(
      detail::history_when.load(std::memory_order_relaxed));
}

// Python frames only from a thread Python knows. PyTorch's operators release
// the GIL while they run, so gathering takes it back, as CUDA's allocator
// does; this is why the cache gathers before its lock. A thread Python never
// saw (a stream's worker) has no frames: it is not made to wait for the GIL.
Context gather(bool cpp) {
  const bool python = Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0 &&
      PyGILState_GetThisThreadState() != nullptr;
  if (!python && !cpp) {
    return nullptr;
  }
  return torch::CapturedTraceback::gather(python, python, cpp);
}

// A graph's pool is filed under a negative stream (EmberGraph.cpp).
c10::MempoolId_t poolOf(emStream_t stream) {
  return stream < 0
      ? c10::MempoolId_t{static_cast<c10::CaptureId_t>(-stream), 0}
      : c10::MempoolId_t{0, 0};
}

void checkOption(const std::string& name, const std::string& value,
                 std::initializer_list<const char*> valid) {
  const bool ok = std::any_of(valid.begin(), valid.end(),
                              [&](const char* v) { return value == v; });
  TORCH_CHECK(ok, "ember: _record_memory_history: ", name, " must be ",
              name == "stacks" ? "'python' or 'all'"
                               : "'state', 'all', or None",
              (name == "context" ? " (or 'alloc')" : ""), ", not '", value,
              "'");
}

} // namespace
} // namespace ember
// ember-book: end memory_history

// ember-book: begin memory_history_events
namespace ember {

void MemoryContext::begin() noexcept {
  active_ = true;
  previous_ = std::move(current_context);
  try {
    current_context = gather(history().cpp.load(std::memory_order_relaxed));
  } catch (...) {
    current_context = nullptr; // no stack is better than no allocation
  }
}

void MemoryContext::end() noexcept {
  current_context = std::move(previous_);
}

// profile_memory=True: a no-op unless a profiler on this thread asks.
void reportMemoryToProfiler(
    MemoryAction action, int device, const void* ptr, size_t size,
    const c10::CachingDeviceAllocator::DeviceStats& stats) {
  const auto bytes = static_cast<int64_t>(size);
  c10::reportMemoryUsageToProfiler(
      const_cast<void*>(ptr), action == TraceEntry::ALLOC ? bytes : -bytes,
      stats.allocated_bytes[kAggregate].current,
      stats.reserved_bytes[kAggregate].current,
      c10::Device(c10::DeviceType::PrivateUse1,
                  static_cast<c10::DeviceIndex>(device)));
}

void recordMemoryEvent(MemoryAction action, int device, const void* ptr,
                       size_t size, emStream_t stream,
                       const c10::CachingDeviceAllocator::DeviceStats& stats) {
  History& h = history();
  const RecordContext when = recordWhen();
  std::lock_guard<std::mutex> lock(h.mutex);
  const Context& context = current_context;
  switch (action) {
    case TraceEntry::ALLOC:
      if (context != nullptr) {
        h.blocks[ptr] = context;
      }
      break;
    case TraceEntry::FREE_COMPLETED:
      h.blocks.erase(ptr);
      break;
    case TraceEntry::SEGMENT_ALLOC:
      if (context != nullptr) {
        h.segments[ptr] = context;
      }
      break;
    case TraceEntry::SEGMENT_FREE:
      h.segments.erase(ptr);
      break;
    default:
      break;
  }
  // An out-of-memory entry's address is the memory the device had free.
  size_t addr = reinterpret_cast<size_t>(ptr);
  if (action == TraceEntry::OOM) {
    size_t free = 0, total = 0;
    addr = emMemGetInfo(device, &free, &total) == emSuccess ? free : 0;
  }
  const bool freeing = action == TraceEntry::FREE_REQUESTED ||
      action == TraceEntry::FREE_COMPLETED ||
      action == TraceEntry::SEGMENT_FREE;
  const bool with_stack = freeing ? when == RecordContext::ALL
                                  : when >= RecordContext::ALLOC;
  TraceEntry entry(action, static_cast<c10::DeviceIndex>(device), addr, size,
                   reinterpret_cast<void*>(std::max<emStream_t>(stream, 0)),
                   poolOf(stream), 0, with_stack ? context : nullptr);
  entry.time_.t_ = c10::getTime() / 1000; // microseconds since the epoch
  if (static_cast<size_t>(device) >= h.traces.size()) {
    h.traces.resize(device + 1);
  }
  h.traces[device].push(std::move(entry), h.max_entries);
}

bool memoryHistoryEnabled() {
  return detail::history_recording.load(std::memory_order_relaxed);
}

} // namespace ember
// ember-book: end memory_history_events

// ember-book: begin memory_history_control
namespace ember {

Context blockContext(const void* ptr) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.blocks.find(ptr);
  return it == h.blocks.end() ? nullptr : it->second;
}

Context segmentContext(const void* ptr) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  auto it = h.segments.find(ptr);
  return it == h.segments.end() ? nullptr : it->second;
}

void recordMemoryHistory(const std::optional<std::string>& enabled,
                         const std::optional<std::string>& context,
                         const std::string& stacks, size_t max_entries,
                         bool clear_history) {
  if (enabled) {
    checkOption("enabled", *enabled, {"state", "all"});
  }
  if (context) {
    checkOption("context", *context, {"state", "alloc", "all"});
  }
  checkOption("stacks", stacks, {"python", "all"});
  const bool on = enabled.has_value();
  // As CUDA: "state" keeps one trace entry, stacks only for live memory.
  const size_t entries =
      on && *enabled == "all" ? std::max<size_t>(max_entries, 1) : 1;
  RecordContext when = RecordContext::NEVER;
  if (on && context) {
    when = *context == "all" ? RecordContext::ALL
        : *context == "alloc" ? RecordContext::ALLOC
                              : RecordContext::STATE;
  }
  const bool cpp = on && stacks == "all";
  if (cpp) {
    torch::unwind::unwind(); // warm up the unwinder, as CUDA does
  }
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  if (!on) {
    h.traces.clear(); // CUDA drops its trace too
    h.blocks.clear();
    h.segments.clear();
  } else if (clear_history) {
    h.traces.clear(); // live blocks keep their stacks
  }
  for (Ring& ring : h.traces) {
    if (ring.entries.size() > entries) { // keep the newest
      auto kept = ring.inOrder();
      kept.erase(kept.begin(), kept.end() - entries);
      ring = Ring{std::move(kept), 0};
    }
  }
  h.max_entries = entries;
  h.cpp.store(cpp);
  detail::history_when.store(static_cast<int>(when));
  detail::history_recording.store(on);
}

std::vector<std::vector<TraceEntry>> memoryTraces(int devices) {
  History& h = history();
  std::lock_guard<std::mutex> lock(h.mutex);
  std::vector<std::vector<TraceEntry>> out(std::max(devices, 0));
  for (size_t d = 0; d < out.size() && d < h.traces.size(); ++d) {
    out[d] = h.traces[d].inOrder();
  }
  return out;
}

} // namespace ember
// ember-book: end memory_history_control
