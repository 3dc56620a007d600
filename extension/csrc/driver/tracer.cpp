// The event callback: a tool (the book's dispatch trace, a profiler) installs
// one function and sees every malloc, free, copy and launch, and, once it
// enables them, the stream kinds. The driver reports after the work and with
// none of its locks held, so a callback may call back into the driver.

#include "internal.h"

#include <atomic>
#include <mutex>

namespace ember::driver::detail {
namespace {

// The event callback lives under its own mutex, not State::mutex: it is
// copied out under the lock and called after it is released, so a callback
// may call back into the driver (or replace itself) without deadlocking.
struct CallbackSlot {
  std::mutex mutex;
  emEventCallback callback = nullptr;
  void* user = nullptr;
};

CallbackSlot& callback_slot() {
  // Never destroyed: callers above us may report during static destruction.
  static CallbackSlot* const instance = new CallbackSlot();
  return *instance;
}

// The kinds reported (emSetEventKindEnabled); kinds 0..3 start enabled.
std::atomic<uint32_t> enabled_kinds{0xFu};

} // namespace

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
  CallbackSlot& slot = callback_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.callback = callback;
  slot.user = user;
  return emSuccess;
}

emError_t emSetEventKindEnabled(emEventKind kind, int enabled) {
  clear_detail();
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
