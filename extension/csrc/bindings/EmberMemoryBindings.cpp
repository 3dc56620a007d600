// torch.ember.memory's history and snapshots: the C entry points behind
// _record_memory_history and _snapshot (device_module/memory.py), which calls
// them through ctypes (a PyDLL: they run holding the GIL and return Python
// objects). C entry points, not a pybind11 module, so that the same Python
// calls a chapter's backend, which load_inline builds as a plain library.
//
// The snapshot is the dictionary torch.cuda.memory._snapshot() returns, key
// for key (torch/csrc/cuda/memory_snapshot.cpp): "segments", each with its
// "blocks"; "device_traces", a list of entries per device; and
// "allocator_settings". So torch.cuda._memory_viz and the viewer at
// pytorch.org/memory_viz read it as they read CUDA's.
#include "memory/EmberMemoryHistory.h"

// ember-book: begin memory_snapshot
#include <c10/core/AllocatorConfig.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/csrc/utils/pybind.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "driver/ember_driver.h"

// libtorch_python's symbolizer (torch/csrc/profiler/python/
// combined_traceback.h), declared here: that header includes
// nlohmann/json.hpp, which the installed torch does not ship.
namespace torch {
TORCH_API std::vector<pybind11::object> py_symbolize(
    std::vector<CapturedTraceback*>& to_symbolize);
} // namespace torch

namespace ember {

namespace {

namespace py = pybind11;
using c10::CachingDeviceAllocator::SegmentInfo;
using c10::CachingDeviceAllocator::TraceEntry;

const char* actionName(TraceEntry::Action action) {
  switch (action) {
    case TraceEntry::ALLOC:
      return "alloc";
    case TraceEntry::FREE_REQUESTED:
      return "free_requested";
    case TraceEntry::FREE_COMPLETED:
      return "free_completed";
    case TraceEntry::SEGMENT_ALLOC:
      return "segment_alloc";
    case TraceEntry::SEGMENT_FREE:
      return "segment_free";
    case TraceEntry::SEGMENT_MAP:
      return "segment_map";
    case TraceEntry::SEGMENT_UNMAP:
      return "segment_unmap";
    case TraceEntry::SNAPSHOT:
      return "snapshot";
    case TraceEntry::OOM:
      return "oom";
  }
  return "unknown";
}

// Stacks are symbolized all at once at the end (py_symbolize shares the
// frames that several stacks have in common): each dict that has one waits
// here for its "frames".
struct Frames {
  std::vector<torch::CapturedTraceback*> tracebacks;
  std::vector<py::dict> owners;

  void add(py::dict& owner,
           const std::shared_ptr<c10::GatheredContext>& context) {
    if (context == nullptr) {
      owner["frames"] = py::list();
      return;
    }
    tracebacks.push_back(torch::getCapturedTracebackFromContext(context));
    owners.push_back(owner);
  }

  void symbolize() {
    auto frames = torch::py_symbolize(tracebacks);
    for (size_t i = 0; i < frames.size(); ++i) {
      owners[i]["frames"] = std::move(frames[i]);
    }
  }
};

py::dict segmentDict(const SegmentInfo& segment, Frames& frames) {
  py::dict d;
  d["device"] = segment.device;
  d["address"] = segment.address;
  d["total_size"] = segment.total_size;
  d["allocated_size"] = segment.allocated_size;
  d["active_size"] = segment.active_size;
  d["requested_size"] = segment.requested_size;
  d["stream"] = reinterpret_cast<int64_t>(segment.stream);
  d["segment_type"] = segment.is_large ? "large" : "small";
  d["segment_pool_id"] = py::make_tuple(segment.owner_private_pool_id.first,
                                        segment.owner_private_pool_id.second);
  d["is_expandable"] = segment.is_expandable;
  frames.add(d, segment.context_when_allocated);
  py::list blocks;
  size_t address = segment.address;
  for (const auto& info : segment.blocks) {
    py::dict block;
    block["address"] = address;
    block["size"] = info.size;
    block["requested_size"] = info.requested_size;
    block["state"] = info.allocated ? "active_allocated"
        : info.active              ? "active_pending_free"
                                   : "inactive";
    frames.add(block, info.context_when_allocated);
    blocks.append(block);
    address += info.size;
  }
  d["blocks"] = blocks;
  return d;
}

py::dict traceDict(const TraceEntry& entry, Frames& frames) {
  py::dict d;
  d["action"] = actionName(entry.action_);
  // An out-of-memory entry carries the device's free memory, not an address.
  d[entry.action_ == TraceEntry::OOM ? "device_free" : "addr"] = entry.addr_;
  d["size"] = entry.size_;
  d["stream"] = reinterpret_cast<int64_t>(entry.stream_);
  d["time_us"] = entry.time_.t_;
  d["compile_context"] = entry.compile_context_;
  d["user_metadata"] = entry.user_metadata_;
  frames.add(d, entry.context_);
  return d;
}

} // namespace
} // namespace ember
// ember-book: end memory_snapshot

// ember-book: begin memory_snapshot_entry
namespace ember {
namespace {

// PYTORCH_ALLOC_CONF as c10 parsed it: what CUDA's snapshot reports too.
py::dict allocatorSettings() {
  using c10::CachingAllocator::AcceleratorAllocatorConfig;
  py::dict d;
  d["PYTORCH_ALLOC_CONF"] =
      AcceleratorAllocatorConfig::last_allocator_settings();
  d["max_split_size"] =
      static_cast<int64_t>(AcceleratorAllocatorConfig::max_split_size());
  d["garbage_collection_threshold"] =
      AcceleratorAllocatorConfig::garbage_collection_threshold();
  d["expandable_segments"] =
      AcceleratorAllocatorConfig::use_expandable_segments();
  return d;
}

py::dict memorySnapshot() {
  std::vector<SegmentInfo> segments;
  std::vector<std::vector<TraceEntry>> traces;
  {
    // The walk takes the cache's lock: never wait for it holding the GIL.
    py::gil_scoped_release no_gil;
    segments = cacheSegments();
    int devices = 0;
    (void)emGetDeviceCount(&devices);
    traces = memoryTraces(devices);
  }
  Frames frames;
  py::list segment_list;
  for (const auto& segment : segments) {
    segment_list.append(segmentDict(segment, frames));
  }
  py::list trace_list;
  for (const auto& trace : traces) {
    py::list entries;
    for (const auto& entry : trace) {
      entries.append(traceDict(entry, frames));
    }
    trace_list.append(entries);
  }
  frames.symbolize();
  py::dict result;
  result["segments"] = segment_list;
  result["device_traces"] = trace_list;
  result["allocator_settings"] = allocatorSettings();
  return result;
}

} // namespace
} // namespace ember

// enabled, context: nullptr for None. Returns None, or nullptr with the
// Python exception set (HANDLE_TH_ERRORS turns c10::Error into RuntimeError,
// c10::ValueError into ValueError, ...).
extern "C" PyObject* emberRecordMemoryHistory(const char* enabled,
                                              const char* context,
                                              const char* stacks,
                                              size_t max_entries,
                                              int clear_history) {
  HANDLE_TH_ERRORS
  auto optional = [](const char* text) {
    return text == nullptr ? std::nullopt : std::optional<std::string>(text);
  };
  ember::recordMemoryHistory(optional(enabled), optional(context), stacks,
                             max_entries, clear_history != 0);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// The snapshot dict, as torch.cuda.memory._snapshot() returns CUDA's.
extern "C" PyObject* emberMemorySnapshot() {
  HANDLE_TH_ERRORS
  return ember::memorySnapshot().release().ptr();
  END_HANDLE_TH_ERRORS
}
// ember-book: end memory_snapshot_entry
