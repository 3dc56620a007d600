// The event callback: a tool (the book's dispatch trace, a profiler) installs
// one function and sees every malloc, free, copy and launch, and, once it
// enables them, the stream kinds. The driver reports after the work and with
// none of its locks held, so a callback may call back into the driver.

#include "internal.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <utility>
#include <vector>

namespace ember::driver::detail {
namespace {

// The event callback lives under its own mutex, not State::mutex: it is
// copied out under the lock and called after it is released, so a callback
// may call back into the driver (or replace itself) without deadlocking.
struct CallbackSlot {
  std::mutex mutex;
  emEventCallback callback = nullptr;
  void* user = nullptr;
  // The activity callback, beside the event callback: a profiler and the
  // book's dispatch trace can watch at once. Under the same mutex, which
  // fork.cpp holds across fork().
  emActivityCallback activity_callback = nullptr;
  void* activity_user = nullptr;
};

CallbackSlot& callback_slot() {
  // Never destroyed: callers above us may report during static destruction.
  static CallbackSlot* const instance = new CallbackSlot();
  return *instance;
}

// The kinds reported (emSetEventKindEnabled); kinds 0..3 start enabled.
std::atomic<uint32_t> enabled_kinds{0xFu};

// The thread's correlation stack (emActivityPushCorrelationId) and its next
// launch's name (emSetNextLaunchName).
thread_local std::vector<uint64_t> correlation_stack;
thread_local const char* next_launch_name = nullptr;

uint64_t this_thread_id() {
  thread_local const uint64_t id = static_cast<uint64_t>(gettid());
  return id;
}

} // namespace

std::atomic<bool> activities_on{false};

uint64_t now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(
          std::chrono::system_clock::now().time_since_epoch())
          .count());
}

ActivityIssue begin_issue() {
  ActivityIssue issue;
  issue.start_ns = now_ns();
  issue.thread = this_thread_id();
  issue.correlation =
      correlation_stack.empty() ? 0 : correlation_stack.back();
  return issue;
}

void report_activity(emActivity& activity, const ActivityIssue& issue) {
  emActivityCallback callback = nullptr;
  void* user = nullptr;
  {
    CallbackSlot& slot = callback_slot();
    std::lock_guard<std::mutex> lock(slot.mutex);
    callback = slot.activity_callback;
    user = slot.activity_user;
  }
  if (callback == nullptr || issue.start_ns == 0) return;
  activity.issue_start_ns = issue.start_ns;
  activity.issue_end_ns = issue.end_ns != 0 ? issue.end_ns : activity.end_ns;
  activity.issue_thread = issue.thread;
  activity.correlation_id = issue.correlation;
  callback(&activity, user);
}

void report_copy(int device, emStream_t stream, emMemcpyKind kind,
                 size_t bytes, uint64_t started, const ActivityIssue& issue,
                 int async) {
  emActivity activity{};
  activity.kind = emActivityMemcpy;
  activity.device = device;
  activity.stream = stream;
  activity.start_ns = started;
  activity.end_ns = now_ns();
  activity.memcpy_kind = kind;
  activity.bytes = bytes;
  activity.async = async;
  report_activity(activity, issue);
}

void report_stream_work(emActivityKind kind, const Stream& s,
                        uint64_t started, const ActivityIssue& issue,
                        emSyncEvent_t event) {
  emActivity activity{};
  activity.kind = kind;
  activity.device = s.device;
  activity.stream = s.id;
  activity.start_ns = started;
  activity.end_ns = kind == emActivitySyncEventRecord ? started : now_ns();
  activity.async = 1;
  activity.sync_event = event;
  report_activity(activity, issue);
}

const char* take_launch_name() {
  return std::exchange(next_launch_name, nullptr);
}

std::mutex& callback_mutex() {
  return callback_slot().mutex;
}

bool kind_enabled(emEventKind kind) {
  return (enabled_kinds.load(std::memory_order_relaxed) >> kind) & 1u;
}

void notify(const emEvent& event) {
  if (!kind_enabled(event.kind)) return;
  emEventCallback callback = nullptr;
  void* user = nullptr;
  {
    CallbackSlot& slot = callback_slot();
    std::lock_guard<std::mutex> lock(slot.mutex);
    callback = slot.callback;
    user = slot.user;
  }
  if (callback != nullptr) callback(&event, user);
}

emEvent make_event(emEventKind kind, int device, size_t bytes,
                   const void* ptr) {
  emEvent event{};
  event.kind = kind;
  event.device = device;
  event.peer_device = -1;
  event.memcpy_kind = emMemcpyHostToDevice; // meaningful for memcpy only
  event.bytes = bytes;
  event.num_buffers = 0;
  event.ptr = ptr;
  return event;
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emSetEventCallback(emEventCallback callback, void* user) {
  const EntryPoint entry;
  CallbackSlot& slot = callback_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.callback = callback;
  slot.user = user;
  return emSuccess;
}

emError_t emSetActivityCallback(emActivityCallback callback, void* user) {
  const EntryPoint entry;
  CallbackSlot& slot = callback_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.activity_callback = callback;
  slot.activity_user = user;
  activities_on.store(callback != nullptr, std::memory_order_relaxed);
  return emSuccess;
}

emError_t emActivityPushCorrelationId(uint64_t id) {
  const EntryPoint entry;
  return translate_exceptions([&] {
    correlation_stack.push_back(id);
    return emSuccess;
  });
}

emError_t emActivityPopCorrelationId(uint64_t* id) {
  const EntryPoint entry;
  if (correlation_stack.empty()) {
    return fail(emErrorInvalidValue, "the correlation stack is empty");
  }
  if (id != nullptr) *id = correlation_stack.back();
  correlation_stack.pop_back();
  return emSuccess;
}

emError_t emSetNextLaunchName(const char* name) {
  const EntryPoint entry;
  next_launch_name = name;
  return emSuccess;
}

emError_t emSetEventKindEnabled(emEventKind kind, int enabled) {
  const EntryPoint entry;
  if (kind < emEventMalloc || kind > emEventStreamWaitSyncEvent) {
    return fail(emErrorInvalidValue, "unknown event kind %d",
                static_cast<int>(kind));
  }
  const uint32_t bit = 1u << kind;
  if (enabled) {
    enabled_kinds.fetch_or(bit);
  } else {
    enabled_kinds.fetch_and(~bit);
  }
  return emSuccess;
}

} // extern "C"
