// Graphs: kernels captured from a stream and replayed with one call.
//
// A capturing stream records each by-value launch (its function, a copy of
// its argument, and its buffers) instead of running it; a replay runs the
// records in order, as one piece of host work in stream order. The graph
// holds a reference to every allocation its kernels use, so their ranges
// are not handed out again while it lives, even after emFree.

#include "internal.h"

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ember::driver::detail {

struct GraphNode {
  void (*fn)(void*);
  std::vector<unsigned char> arg;   // the launch's argument, copied
  std::vector<AllocationPtr> allocs; // the buffers it uses, kept alive
  size_t num_buffers;
  std::string name; // emSetNextLaunchName's at capture ("" if none)
  // emLaunchKernelRecordable's: the clone of its argument, which owns what
  // the kernel needs (freed by the launcher's destroy). Empty: use `arg`.
  std::shared_ptr<void> owned;
  void* argument() { return owned ? owned.get() : arg.data(); }
};

struct Capture {
  emStreamCaptureMode mode = emStreamCaptureModeGlobal;
  std::thread::id owner; // the thread that began the capture
  std::vector<GraphNode> nodes;
  std::string invalidated_by; // the call that broke the capture, if any
};

struct Graph {
  int device;
  std::vector<GraphNode> nodes;
};

namespace {

// Graphs by id, behind the scheduler mutex.
struct Graphs {
  std::unordered_map<emGraph_t, std::shared_ptr<Graph>> by_id;
  emGraph_t next = 1;
};

Graphs& graphs() {
  static auto* all = new Graphs; // never destroyed, like the scheduler
  return *all;
}

emError_t find_graph(emGraph_t id, std::shared_ptr<Graph>* out) {
  auto it = graphs().by_id.find(id);
  if (it == graphs().by_id.end()) {
    return fail(emErrorInvalidValue, "graph %lld does not exist",
                static_cast<long long>(id));
  }
  *out = it->second;
  return emSuccess;
}

// The allocations behind `buffers` (nullptr entries skipped), or nullptr if
// one is not device memory.
std::optional<std::vector<AllocationPtr>> allocations_of(void* const* buffers,
                                                          size_t count) {
  std::vector<AllocationPtr> allocs;
  allocs.reserve(count);
  std::lock_guard<std::mutex> lock(state().mutex);
  for (size_t i = 0; i < count; ++i) {
    if (buffers[i] == nullptr) continue;
    AllocationPtr alloc = find_allocation(addr(buffers[i]));
    if (!alloc) return std::nullopt;
    allocs.push_back(std::move(alloc));
  }
  return allocs;
}

} // namespace

bool capture_prohibits_unsafe_call(Stream* s) {
  if (s == nullptr || s->capture == nullptr) return false;
  switch (s->capture->mode) {
    case emStreamCaptureModeRelaxed:
      return false;
    case emStreamCaptureModeThreadLocal:
      return s->capture->owner == std::this_thread::get_id();
    default:
      return true;
  }
}

emError_t capture_violation(Stream* s, const char* call) {
  if (s == nullptr || s->capture == nullptr) return emSuccess;
  if (s->capture->invalidated_by.empty()) s->capture->invalidated_by = call;
  const char* why = "it runs or waits for work now";
  if (std::strcmp(call, "emLaunchKernel") == 0) {
    why = "its argument is read in place: only launches by value are recorded";
  } else if (std::strcmp(call, "emLaunchKernelAsync") == 0) {
    why = "graphs of asynchronous kernels are not supported";
  }
  return fail(emErrorStreamCapture,
              "stream %lld of ember device %d is capturing a graph, and %s "
              "cannot be captured (%s); the capture is invalidated",
              static_cast<long long>(s->id), s->device, call, why);
}

void capture_owned(Stream* s, void (*fn)(void*), void* owned,
                   void (*destroy)(void*), std::vector<AllocationPtr> allocs,
                   size_t num_buffers, const char* name) {
  std::shared_ptr<void> copy(owned, destroy); // destroys owned if it throws
  GraphNode node{fn, {}, std::move(allocs), num_buffers,
                 name != nullptr ? name : "", std::move(copy)};
  s->capture->nodes.push_back(std::move(node));
}

void capture_copy(Stream* s, void* to, const void* from, size_t count,
                  std::vector<AllocationPtr> allocs) {
  // The host addresses of both sides, fixed at capture (the graph keeps
  // their allocations): a replay copies again, re-reading the source, as
  // a graph's memcpy node does on CUDA.
  struct Copy {
    void* to;
    const void* from;
    size_t count;
    static void run(void* arg) {
      const Copy* c = static_cast<const Copy*>(arg);
      std::memmove(c->to, c->from, c->count);
    }
  };
  const Copy copy{to, from, count};
  std::vector<unsigned char> bytes(sizeof(Copy));
  std::memcpy(bytes.data(), &copy, sizeof(Copy));
  const size_t num_buffers = allocs.size();
  s->capture->nodes.push_back(GraphNode{&Copy::run, std::move(bytes),
                                        std::move(allocs), num_buffers,
                                        "emMemcpyAsync", nullptr});
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emStreamBeginCapture(int device, emStream_t stream) {
  const EntryPoint entry;
  return emStreamBeginCaptureWithMode(device, stream, emStreamCaptureModeGlobal);
}

emError_t emStreamBeginCaptureWithMode(int device, emStream_t stream,
                                       emStreamCaptureMode mode) {
  const EntryPoint entry;
  if (mode != emStreamCaptureModeGlobal &&
      mode != emStreamCaptureModeThreadLocal &&
      mode != emStreamCaptureModeRelaxed) {
    return emErrorInvalidValue;
  }
  return translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    const emError_t found = find_stream(device, stream, &s);
    if (found != emSuccess) return found;
    if (s->capture != nullptr) {
      return fail(emErrorStreamCapture,
                  "stream %lld of ember device %d is already capturing",
                  static_cast<long long>(stream), device);
    }
    s->capture = new Capture;
    s->capture->mode = mode;
    s->capture->owner = std::this_thread::get_id();
    return emSuccess;
  });
}

emError_t emStreamEndCapture(int device, emStream_t stream, emGraph_t* graph) {
  const EntryPoint entry;
  if (graph == nullptr) return emErrorInvalidValue;
  // An invalidated capture's kernels, destroyed after the lock is released:
  // their owned arguments may free device memory.
  std::vector<GraphNode> dropped;
  return translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    const emError_t found = find_stream(device, stream, &s);
    if (found != emSuccess) return found;
    if (s->capture == nullptr) {
      return fail(emErrorStreamCapture,
                  "stream %lld of ember device %d is not capturing",
                  static_cast<long long>(stream), device);
    }
    std::unique_ptr<Capture> capture(s->capture);
    s->capture = nullptr;
    if (!capture->invalidated_by.empty()) {
      dropped = std::move(capture->nodes);
      return fail(emErrorStreamCapture,
                  "the capture on stream %lld of ember device %d was "
                  "invalidated by %s",
                  static_cast<long long>(stream), device,
                  capture->invalidated_by.c_str());
    }
    auto made = std::make_shared<Graph>();
    made->device = device;
    made->nodes = std::move(capture->nodes);
    *graph = graphs().next++;
    graphs().by_id.emplace(*graph, std::move(made));
    return emSuccess;
  });
}

emError_t emStreamIsCapturing(int device, emStream_t stream, int* capturing) {
  const EntryPoint entry;
  if (capturing == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  Stream* s = nullptr;
  const emError_t found = find_stream(device, stream, &s);
  if (found != emSuccess) return found;
  *capturing = s->capture != nullptr ? 1 : 0;
  return emSuccess;
}

emError_t emLaunchKernelByValue(void (*fn)(void* arg), const void* arg,
                                size_t arg_size, void* const* buffers,
                                size_t num_buffers) {
  const EntryPoint entry;
  // Taken on every path; handed on to emLaunchKernel when it runs now.
  const char* name = take_launch_name();
  if (fn == nullptr || (arg == nullptr && arg_size > 0) ||
      (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<unsigned char> copy(static_cast<const unsigned char*>(arg),
                                  static_cast<const unsigned char*>(arg) +
                                      arg_size);
  if (kernel_depth == 0) {
    Stream* stream = current_stream_of(current_device);
    bool recorded = false;
    const emError_t status = translate_exceptions([&] {
      std::unique_lock<std::mutex> lock = lock_scheduler();
      if (stream->capture == nullptr) return emSuccess;
      auto allocs = allocations_of(buffers, num_buffers);
      if (!allocs) return emErrorInvalidValue;
      stream->capture->nodes.push_back(GraphNode{fn, std::move(copy),
                                                 std::move(*allocs),
                                                 num_buffers,
                                                 name != nullptr ? name : ""});
      recorded = true;
      return emSuccess;
    });
    if (status != emSuccess || recorded) return status;
  }
  emSetNextLaunchName(name);
  return emLaunchKernel(fn, copy.data(), buffers, num_buffers);
}

emError_t emGraphLaunch(emGraph_t graph, int device, emStream_t stream) {
  const EntryPoint entry;
  std::shared_ptr<Graph> g;
  Stream* s = nullptr;
  emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    emError_t found = find_graph(graph, &g);
    if (found == emSuccess) found = find_stream(device, stream, &s);
    if (found == emSuccess) found = capture_violation(s, "emGraphLaunch");
    if (found != emSuccess) return found;
    if (g->device != device) {
      return fail(emErrorInvalidValue,
                  "graph %lld was captured on ember device %d: it cannot "
                  "run on device %d",
                  static_cast<long long>(graph), g->device, device);
    }
    return emSuccess;
  });
  if (status != emSuccess) return status;
  // Each kernel's span, if a profiler listens (reported once the replay is
  // done, like a launch).
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  std::vector<std::pair<uint64_t, uint64_t>> spans;
  ActivityIssue call = issue; // the replay call, for every kernel in it
  status = translate_exceptions([&] {
    if (issue.start_ns != 0) spans.reserve(g->nodes.size());
    HostWork work(s, s); // in order on the stream, like one launch
    const emError_t failed = work.status(); // a stream's kernel failed
    if (failed != emSuccess) return failed;
    KernelScope scope;
    for (GraphNode& node : g->nodes) {
      const uint64_t started = issue.start_ns != 0 ? now_ns() : 0;
      node.fn(node.argument());
      if (started != 0) spans.emplace_back(started, now_ns());
    }
    return emSuccess;
  });
  if (status != emSuccess) return status;
  if (!spans.empty()) call.end_ns = spans.back().second;
  for (size_t i = 0; i < spans.size(); ++i) {
    emActivity activity{};
    activity.kind = emActivityKernel;
    activity.device = device;
    activity.stream = stream;
    activity.start_ns = spans[i].first;
    activity.end_ns = spans[i].second;
    const std::string& name = g->nodes[i].name;
    activity.name = name.empty() ? nullptr : name.c_str();
    activity.graph = graph;
    report_activity(activity, call);
  }
  for (const GraphNode& node : g->nodes) {
    emEvent event = make_event(emEventKernelLaunch, device, 0, nullptr);
    event.num_buffers = node.num_buffers;
    event.stream = stream;
    notify(event);
  }
  return emSuccess;
}

emError_t emGraphGetNodeCount(emGraph_t graph, size_t* count) {
  const EntryPoint entry;
  if (count == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  std::shared_ptr<Graph> g;
  const emError_t found = find_graph(graph, &g);
  if (found != emSuccess) return found;
  *count = g->nodes.size();
  return emSuccess;
}

emError_t emGraphDestroy(emGraph_t graph) {
  const EntryPoint entry;
  std::shared_ptr<Graph> g;
  {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    const emError_t found = find_graph(graph, &g);
    if (found != emSuccess) return found;
    graphs().by_id.erase(graph);
  }
  g.reset(); // its allocations may go back: without the scheduler's lock
  return emSuccess;
}

} // extern "C"
