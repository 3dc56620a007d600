// Streams: in-order queues of device work, each run by its own worker thread.
//
// Every stream is a queue of operations (copies, sleeps, asynchronous
// kernels, event records and waits) that one detached worker thread runs in
// order. One mutex
// (Scheduler::mutex) guards all stream and event state; workers wait on their
// stream's condition variable for work, and everyone who waits for progress
// (a synchronize, a worker at an event wait) waits on one shared condition
// variable that each finished operation notifies. Kernels and synchronous
// copies run on the host thread that issued them: they wait for their
// stream's earlier work, then "hold" the stream (HostWork, host_holds) so its
// worker starts nothing queued later until they are done.
//
// The operations sync events add to a queue (record, wait) are run here too;
// the events themselves are in event.cpp.
//
// A kernel that fails (emKernelFail) marks its stream failed, for good: the
// flag never stops the queue (queued kernels own their arguments and must
// run), it makes the calls that wait for the stream or run work in order on it
// report emErrorLaunchFailure. Events carry it to the streams that wait on
// them.

#include "internal.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

namespace ember::driver::detail {
namespace {

constexpr size_t kMaxStreamsPerDevice = 1024;

// Per host thread and device: the current stream (nullptr: the default).
thread_local std::array<Stream*, kNumDevices> current_streams{};
// The streams this thread holds while a kernel or copy of it runs (so that a
// forked child, which only has this thread, knows which holds survive).
thread_local std::vector<Stream*> held_streams;

void worker_main(Stream* s);

// Caller holds the scheduler mutex. Wakes the stream's worker, starting it
// if there is none (first async work, or a forked child).
void wake(Stream* s) {
  if (s->queue.empty() || s->host_holds > 0) return;
  if (!s->has_worker) {
    std::thread(worker_main, s).detach(); // may throw std::system_error
    s->has_worker = true;
  } else {
    s->work.notify_one();
  }
}

bool wait_met(const Op& op) {
  return op.event->completed >= op.generation;
}

// An asynchronous kernel, on its stream's worker, with no lock held. fn runs
// as a kernel launched on (s->device, s): nested launches and copies see that
// device and stream as current and run at once, like those of a host kernel.
void run_kernel(Stream* s, const Op& op) {
  current_device = s->device;
  current_streams[s->device] = s;
  const uint64_t started = op.issue.start_ns != 0 ? now_ns() : 0;
  worker_stream = s;
  {
    KernelScope scope;
    op.fn(op.arg);
  }
  worker_stream = nullptr;
  if (started != 0) {
    emActivity activity{};
    activity.kind = emActivityKernel;
    activity.device = s->device;
    activity.stream = s->id;
    activity.start_ns = started;
    activity.end_ns = now_ns();
    activity.name = op.named ? op.name.c_str() : nullptr;
    activity.async = 1;
    report_activity(activity, op.issue);
  }
}

} // namespace

Scheduler::Scheduler() {
  for (int d = 0; d < kNumDevices; ++d) {
    streams[d].push_back(new Stream(d, 0));
  }
}

Scheduler& scheduler() {
  static Scheduler* const instance = [] {
    state(); // registers the fork handlers, which drain the streams
    return new Scheduler(); // never destroyed: see state()
  }();
  return *instance;
}

// Locks the scheduler; in a forked child, the first lock restarts workers
// for the work it inherited.
std::unique_lock<std::mutex> lock_scheduler() {
  Scheduler& sc = scheduler();
  std::unique_lock<std::mutex> lock(sc.mutex);
  if (sc.restart_workers) {
    sc.restart_workers = false;
    for (auto& list : sc.streams) {
      for (Stream* s : list) {
        try {
          wake(s);
        } catch (const std::system_error&) {
          sc.restart_workers = true; // try again on the next call
        }
      }
    }
  }
  return lock;
}

void notify_progress() {
  Scheduler& sc = scheduler();
  sc.progress.notify_all();
  for (auto& list : sc.streams) {
    for (Stream* s : list) {
      if (s->has_worker && !s->queue.empty() &&
          s->queue.front().kind == Op::kWait) {
        s->work.notify_one();
      }
    }
  }
}

namespace {

void worker_main(Stream* s) {
  Scheduler& sc = scheduler();
  std::unique_lock<std::mutex> lock(sc.mutex);
  for (;;) {
    // Runnable: a queued op, no host kernel holding the stream, and (for an
    // event wait at the front) its event reached. Idle workers block here.
    s->work.wait(lock, [&] {
      return !s->queue.empty() && s->host_holds == 0 &&
          (s->queue.front().kind != Op::kWait || wait_met(s->queue.front()));
    });
    Op op = std::move(s->queue.front());
    s->queue.pop_front();
    s->running = true;
    if (op.kind == Op::kRecord) {
      // Timed before anyone waiting can see the event complete.
      const uint64_t reached = op.issue.start_ns != 0 ? now_ns() : 0;
      complete_record(*op.event, op.generation, *s);
      if (reached != 0) {
        lock.unlock(); // the callback runs with no driver lock held
        report_stream_work(emActivitySyncEventRecord, *s, reached, op.issue,
                           op.event->id);
        lock.lock();
      }
    } else if (op.kind == Op::kWait) {
      // The event's failure passes to the stream that waited for it.
      if (op.event->failed && !s->failed) {
        s->failure = op.event->failure;
        s->failed = true;
      }
    } else {
      lock.unlock();
      if (op.kind == Op::kKernel) {
        run_kernel(s, op);
      } else if (op.kind == Op::kCopy) {
        const uint64_t started = op.issue.start_ns != 0 ? now_ns() : 0;
        std::memmove(op.to, op.from, op.count);
        if (started != 0) {
          report_copy(s->device, s->id, op.copy_kind, op.count, started,
                      op.issue, /*async=*/1);
        }
      } else {
        const uint64_t started = op.issue.start_ns != 0 ? now_ns() : 0;
        std::this_thread::sleep_for(std::chrono::microseconds(op.microseconds));
        if (started != 0) {
          report_stream_work(emActivitySleep, *s, started, op.issue);
        }
      }
      // Released without the lock: the last reference returns the range.
      op.allocs.clear();
      lock.lock();
    }
    s->running = false;
    s->done = op.seq;
    // Host waiters and other streams' event waits look at `done` and events.
    notify_progress();
  }
}

} // namespace

emError_t find_stream(int device, emStream_t id, Stream** out) {
  if (!valid_device(device)) return invalid_device(device);
  Scheduler& sc = scheduler();
  if (id == 0) {
    *out = sc.streams[device][0];
    return emSuccess;
  }
  auto it = sc.by_id.find(id);
  if (it == sc.by_id.end()) {
    return fail(emErrorInvalidValue,
                "stream %lld does not exist on ember device %d (ids come "
                "from emStreamCreate; 0 is the default stream)",
                static_cast<long long>(id), device);
  }
  if (it->second->device != device) {
    return fail(emErrorInvalidValue,
                "stream %lld belongs to ember device %d, not device %d",
                static_cast<long long>(id), it->second->device, device);
  }
  *out = it->second;
  return emSuccess;
}

emError_t no_wait_in_kernel(const char* call) {
  return fail(emErrorInvalidValue,
              "%s inside a kernel: the kernel's own stream cannot finish "
              "before the kernel does",
              call);
}

Stream* current_stream_of(int device) {
  Stream* s = current_streams[device];
  return s != nullptr ? s : scheduler().streams[device][0];
}

emError_t launch_failure(const Stream& s) {
  return fail(emErrorLaunchFailure, "%s", s.failure.c_str());
}

// Caller holds the scheduler mutex (through `lock`). Queues `op` on `s`. If
// it throws, nothing is queued: a caller that reports failure must be able
// to promise the op never runs (emLaunchKernelAsync's fn).
void enqueue(Stream* s, Op op) {
  op.seq = s->enqueued + 1;
  s->queue.push_back(std::move(op));
  try {
    wake(s);
  } catch (...) {
    s->queue.pop_back();
    throw;
  }
  ++s->enqueued;
}

HostWork::HostWork(Stream* a, Stream* b) {
  if (kernel_depth > 0) return;
  held_streams.reserve(held_streams.size() + 2); // may throw: nothing held
  streams_[0] = a;
  streams_[1] = (b != a) ? b : nullptr;
  Scheduler& sc = scheduler();
  std::unique_lock<std::mutex> lock = lock_scheduler();
  const uint64_t target0 = a->enqueued;
  const uint64_t target1 = streams_[1] ? streams_[1]->enqueued : 0;
  // Wait for both, then hold both at once: holding one while waiting for
  // the other could block work the other waits for.
  sc.progress.wait(lock, [&] {
    return a->done >= target0 &&
        (streams_[1] == nullptr || streams_[1]->done >= target1);
  });
  for (Stream* s : streams_) {
    if (s != nullptr && s->failed && !failed_) {
      failure_ = s->failure; // may throw: nothing held yet
      failed_ = true;
    }
  }
  for (Stream* s : streams_) {
    if (s == nullptr) continue;
    ++s->host_holds;
    held_streams.push_back(s); // reserved above: cannot throw
  }
}

emError_t HostWork::status() const {
  return failed_ ? fail(emErrorLaunchFailure, "%s", failure_.c_str())
                 : emSuccess;
}

HostWork::~HostWork() {
  if (streams_[0] == nullptr) return;
  std::lock_guard<std::mutex> lock(scheduler().mutex);
  for (Stream* s : streams_) {
    if (s == nullptr) continue;
    --s->host_holds;
    held_streams.erase(
        std::find(held_streams.begin(), held_streams.end(), s));
    try {
      wake(s);
    } catch (const std::system_error&) {
      // The work stays queued; the next call on the stream retries.
    }
  }
  notify_progress();
}

// fork() (ember_driver.h says what, fork.cpp calls these). The parent waits
// until every stream is idle or cannot progress (held by a host kernel, or at
// an event wait not yet met), then keeps the scheduler locked across fork().
void scheduler_before_fork() {
  Scheduler& sc = scheduler();
  std::unique_lock<std::mutex> lock(sc.mutex);
  sc.progress.wait(lock, [&] {
    for (auto& list : sc.streams) {
      for (Stream* s : list) {
        const bool stuck = s->host_holds > 0 ||
            (!s->running && !s->queue.empty() &&
             s->queue.front().kind == Op::kWait && !wait_met(s->queue.front()));
        if (!s->idle() && !stuck) return false;
      }
    }
    return true;
  });
  lock.release(); // unlocked in after_fork_*
}

void scheduler_after_fork_parent() {
  scheduler().mutex.unlock();
}

void scheduler_after_fork_child() {
  Scheduler& sc = scheduler();
  // Only this thread exists now: no workers, and only its own holds. The
  // condition variables still count the parent's waiting workers, which
  // would swallow the child's wake-ups: make them afresh (nobody waits).
  new (&sc.progress) std::condition_variable();
  for (auto& list : sc.streams) {
    for (Stream* s : list) {
      new (&s->work) std::condition_variable();
      s->has_worker = false;
      s->running = false;
      s->host_holds = 0;
    }
  }
  for (Stream* s : held_streams) ++s->host_holds;
  sc.restart_workers = true;
  sc.mutex.unlock();
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emStreamCreate(int device, emStream_t* stream) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  if (stream == nullptr) return emErrorInvalidValue;
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::lock_guard<std::mutex> lock(sc.mutex);
    std::vector<Stream*>& list = sc.streams[device];
    if (list.size() > kMaxStreamsPerDevice) {
      return fail(emErrorMemoryAllocation,
                  "ember device %d already has %zu streams (the most a "
                  "device can have)",
                  device, kMaxStreamsPerDevice);
    }
    auto created = std::make_unique<Stream>(device, sc.next_stream);
    list.reserve(list.size() + 1);
    sc.by_id.emplace(created->id, created.get());
    list.push_back(created.release()); // never destroyed: see Scheduler
    *stream = sc.next_stream++;
    return emSuccess;
  });
}

emError_t emStreamQuery(int device, emStream_t stream, int* idle) {
  const EntryPoint entry;
  if (idle == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  Stream* s = nullptr;
  const emError_t status = find_stream(device, stream, &s);
  if (status != emSuccess) return status;
  *idle = s->idle() ? 1 : 0;
  return emSuccess;
}

emError_t emStreamSynchronize(int device, emStream_t stream) {
  const EntryPoint entry;
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    emError_t status = find_stream(device, stream, &s);
    if (status == emSuccess) status = capture_violation(s, "emStreamSynchronize");
    if (status != emSuccess) return status;
    const uint64_t target = s->enqueued;
    if (s->done < target) {
      if (kernel_depth > 0) return no_wait_in_kernel("emStreamSynchronize");
      sc.progress.wait(lock, [&] { return s->done >= target; });
    }
    return s->failed ? launch_failure(*s) : emSuccess;
  });
}

emError_t emGetStream(int device, emStream_t* stream) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  if (stream == nullptr) return emErrorInvalidValue;
  Stream* s = current_streams[device];
  *stream = s != nullptr ? s->id : 0;
  return emSuccess;
}

emError_t emSetStream(int device, emStream_t stream) {
  const EntryPoint entry;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  Stream* s = nullptr;
  const emError_t status = find_stream(device, stream, &s);
  if (status != emSuccess) return status;
  current_streams[device] = s;
  return emSuccess;
}

emError_t emMemcpyAsync(void* dst, const void* src, size_t count,
                        emMemcpyKind kind, int device, emStream_t stream) {
  const EntryPoint entry;
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  std::vector<AllocationPtr> allocs;
  emError_t status = check_copy(dst, src, count, kind, allocs);
  if (status != emSuccess) return status;
  emEvent event{};
  bool recorded = false;
  status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    emError_t found = find_stream(device, stream, &s);
    if (found != emSuccess || count == 0) return found;
    if (s->capture != nullptr) {
      // Recorded, not queued: the copy happens at each replay. The host
      // side is pinned memory (the caller queues no other host copy).
      capture_copy(s, copy_target(dst, kind), copy_source(src, kind), count,
                   std::move(allocs));
      recorded = true;
      return emSuccess;
    }
    event = make_event(emEventMemcpy, allocs[0]->device, count, dst);
    event.memcpy_kind = kind;
    if (kind == emMemcpyDeviceToDevice) event.peer_device = allocs[1]->device;
    event.stream = stream;
    event.async = 1;
    Op op;
    op.kind = Op::kCopy;
    op.to = copy_target(dst, kind);
    op.from = copy_source(src, kind);
    op.count = count;
    op.allocs = std::move(allocs);
    op.copy_kind = kind;
    if (issue.start_ns != 0) {
      op.issue = issue;
      op.issue.end_ns = now_ns(); // the call's span: checked and queued
    }
    enqueue(s, std::move(op));
    return emSuccess;
  });
  if (status == emSuccess && count > 0 && !recorded) notify(event);
  return status;
}

emError_t emSleepAsync(uint64_t microseconds, int device, emStream_t stream) {
  const EntryPoint entry;
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    emError_t found = find_stream(device, stream, &s);
    if (found == emSuccess) found = capture_violation(s, "emSleepAsync");
    if (found != emSuccess) return found;
    Op op;
    op.kind = Op::kSleep;
    op.microseconds = microseconds;
    if (issue.start_ns != 0) {
      op.issue = issue;
      op.issue.end_ns = now_ns();
    }
    enqueue(s, std::move(op));
    return emSuccess;
  });
  if (status == emSuccess && kind_enabled(emEventSleep)) {
    emEvent event = make_event(emEventSleep, device, 0, nullptr);
    event.stream = stream;
    event.async = 1;
    event.microseconds = microseconds;
    notify(event);
  }
  return status;
}

} // extern "C"
