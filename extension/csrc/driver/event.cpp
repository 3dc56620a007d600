// Sync events: markers recorded into a stream, which the host can query or
// wait for, other streams can wait on, and which time the work between two
// of them (what torch.ember.Event builds on). An event is "completed" when
// the stream's worker reaches its record (stream.cpp runs the queue), and
// takes on the stream's failure (emKernelFail) then, if it has one.

#include "internal.h"

#include <chrono>
#include <string>
#include <utility>

namespace ember::driver::detail {
namespace {

emError_t unrecorded(const SyncEvent& event) {
  return fail(emErrorInvalidValue,
              "event %lld (ember device %d) has never been recorded",
              static_cast<long long>(event.id), event.device);
}

} // namespace

// Caller holds the scheduler mutex.
void complete_record(SyncEvent& event, uint64_t generation, const Stream& s) {
  if (generation > event.completed) {
    event.completed = generation;
    event.time = Clock::now();
    event.failure = s.failed ? s.failure : std::string();
    event.failed = s.failed;
  }
}

// Caller holds the scheduler mutex.
emError_t find_event(emSyncEvent_t id, SyncEventPtr* out) {
  auto& events = scheduler().events;
  auto it = events.find(id);
  if (it == events.end()) {
    return fail(emErrorInvalidValue,
                "event %lld does not exist (never created, or destroyed)",
                static_cast<long long>(id));
  }
  *out = it->second;
  return emSuccess;
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emSyncEventCreate(int device, emSyncEvent_t* event,
                            unsigned int flags) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  if (event == nullptr) return emErrorInvalidValue;
  if ((flags & ~static_cast<unsigned int>(emSyncEventDisableTiming)) != 0) {
    return fail(emErrorInvalidValue, "unknown event flags 0x%x", flags);
  }
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::lock_guard<std::mutex> lock(sc.mutex);
    const emSyncEvent_t id = sc.next_event;
    sc.events.emplace(id, std::make_shared<SyncEvent>(id, device, flags));
    ++sc.next_event;
    *event = id;
    return emSuccess;
  });
}

emError_t emSyncEventDestroy(emSyncEvent_t event) {
  const EntryPoint entry;
  SyncEventPtr doomed; // released after the lock
  std::unique_lock<std::mutex> lock = lock_scheduler();
  const emError_t status = find_event(event, &doomed);
  if (status == emSuccess) scheduler().events.erase(event);
  lock.unlock();
  return status;
}

emError_t emSyncEventRecord(emSyncEvent_t event, int device,
                            emStream_t stream) {
  const EntryPoint entry;
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  Stream* reached = nullptr; // the stream, if it reached the event at once
  uint64_t reached_ns = 0;
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    Stream* s = nullptr;
    emError_t found = find_event(event, &e);
    if (found == emSuccess) found = find_stream(device, stream, &s);
    if (found == emSuccess) found = capture_violation(s, "emSyncEventRecord");
    if (found != emSuccess) return found;
    if (e->device != device) {
      return fail(emErrorInvalidValue,
                  "event %lld belongs to ember device %d: it cannot be "
                  "recorded on stream %lld of device %d",
                  static_cast<long long>(event), e->device,
                  static_cast<long long>(stream), device);
    }
    const uint64_t generation = ++e->recorded;
    if (s->idle()) {
      // Nothing ahead of it: the stream reaches the event now.
      if (issue.start_ns != 0) reached_ns = now_ns();
      complete_record(*e, generation, *s);
      notify_progress();
      reached = s;
      return emSuccess;
    }
    Op op;
    op.kind = Op::kRecord;
    op.event = std::move(e);
    op.generation = generation;
    if (issue.start_ns != 0) {
      op.issue = issue;
      op.issue.end_ns = now_ns();
    }
    enqueue(s, std::move(op));
    return emSuccess;
  });
  if (reached != nullptr && issue.start_ns != 0) {
    report_stream_work(emActivitySyncEventRecord, *reached, reached_ns, issue,
                       event);
  }
  if (status == emSuccess && kind_enabled(emEventSyncEventRecord)) {
    emEvent record = make_event(emEventSyncEventRecord, device, 0, nullptr);
    record.stream = stream;
    record.async = 1;
    record.sync_event = event;
    notify(record);
  }
  return status;
}

emError_t emSyncEventQuery(emSyncEvent_t event, int* done) {
  const EntryPoint entry;
  if (done == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  SyncEventPtr e;
  const emError_t status = find_event(event, &e);
  if (status != emSuccess) return status;
  if (e->recorded == 0) return unrecorded(*e);
  *done = e->completed >= e->recorded ? 1 : 0;
  return emSuccess;
}

emError_t emSyncEventSynchronize(emSyncEvent_t event) {
  const EntryPoint entry;
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    const emError_t status = find_event(event, &e);
    if (status != emSuccess) return status;
    if (e->recorded == 0) return unrecorded(*e);
    const uint64_t generation = e->recorded;
    if (e->completed < generation) {
      if (kernel_depth > 0) return no_wait_in_kernel("emSyncEventSynchronize");
      sc.progress.wait(lock, [&] { return e->completed >= generation; });
    }
    return e->failed ? fail(emErrorLaunchFailure, "%s", e->failure.c_str())
                     : emSuccess;
  });
}

emError_t emStreamWaitSyncEvent(int device, emStream_t stream,
                                emSyncEvent_t event) {
  const EntryPoint entry;
  int event_device = -1;
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    Stream* s = nullptr;
    emError_t found = find_stream(device, stream, &s);
    if (found == emSuccess) found = capture_violation(s, "emStreamWaitSyncEvent");
    if (found == emSuccess) found = find_event(event, &e);
    if (found != emSuccess) return found;
    if (e->recorded == 0) return unrecorded(*e);
    event_device = e->device;
    // Nothing to wait for; but a failed event still passes its failure on,
    // when the stream's worker reaches the wait (queued, already met).
    if (e->completed >= e->recorded && !e->failed) return emSuccess;
    Op op;
    op.kind = Op::kWait;
    op.generation = e->recorded;
    op.event = std::move(e);
    enqueue(s, std::move(op));
    return emSuccess;
  });
  if (status == emSuccess && kind_enabled(emEventStreamWaitSyncEvent)) {
    emEvent wait = make_event(emEventStreamWaitSyncEvent, device, 0, nullptr);
    wait.peer_device = event_device;
    wait.stream = stream;
    wait.async = 1;
    wait.sync_event = event;
    notify(wait);
  }
  return status;
}

emError_t emSyncEventElapsedTime(float* ms, emSyncEvent_t start,
                                 emSyncEvent_t end) {
  const EntryPoint entry;
  if (ms == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  SyncEventPtr a;
  SyncEventPtr b;
  emError_t status = find_event(start, &a);
  if (status == emSuccess) status = find_event(end, &b);
  if (status != emSuccess) return status;
  for (const SyncEventPtr& e : {a, b}) {
    if (!e->timing) {
      return fail(emErrorInvalidValue,
                  "event %lld was created with emSyncEventDisableTiming: it "
                  "has no timestamp",
                  static_cast<long long>(e->id));
    }
    if (e->recorded == 0) return unrecorded(*e);
  }
  if (a->device != b->device) {
    return fail(emErrorInvalidValue,
                "events %lld and %lld belong to different ember devices (%d "
                "and %d)",
                static_cast<long long>(start), static_cast<long long>(end),
                a->device, b->device);
  }
  for (const SyncEventPtr& e : {a, b}) {
    if (e->completed < e->recorded) {
      return fail(emErrorInvalidValue,
                  "event %lld has not completed its latest record yet",
                  static_cast<long long>(e->id));
    }
  }
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return emSuccess;
}

} // extern "C"
