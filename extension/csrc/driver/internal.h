// What the driver's own files share, and nobody else may include: the state
// behind the C API of ember_driver.h (device memory, streams, sync events) and
// the helpers every entry point uses (error detail, exception translation).
// The public header is the contract; this one can change with any commit.
//
// One file per area, each implementing part of the C API:
//   error.cpp   emGetErrorString/Detail; the thread's error detail
//   device.cpp  devices, the current device, emDeviceSynchronize
//   memory.cpp  the double-mapped device memory, allocations, copies, stats
//   vmm.cpp     address reservations and the pages mapped into them
//   launch.cpp  kernels (emLaunchKernel, emLaunchKernelAsync, emKernelFail,
//               emGetKernelOffset)
//   stream.cpp  streams, their worker threads, asynchronous work
//   event.cpp   sync events (record, wait, query, elapsed time)
//   graph.cpp   graphs: by-value launches captured and replayed
//   link.cpp    links: shared memory mapped into device address space
//   tracer.cpp  the event callback and the activity records tools watch
//   fork.cpp    fork(): the child gets device memory of its own
//
// Two locks, never held by user code: State::mutex (then ranges_mutex) for
// memory, Scheduler::mutex for streams and events. Where both are taken
// (fork), the scheduler's comes first.
#pragma once

#include "ember_driver.h"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace ember::driver::detail {

constexpr int kNumDevices = 2;

// ---------------------------------------------------------------------------
// Errors (error.cpp).

// The first statement of every C entry point (`const EntryPoint entry;`;
// test_driver_selftest.py checks that each one has it): the call starts with
// this thread's error detail cleared, so a call that succeeds, or fails
// without saying why, shows nothing stale from an earlier call. One guard
// rather than a call each entry point must remember.
struct EntryPoint {
  EntryPoint();
  EntryPoint(const EntryPoint&) = delete;
  EntryPoint& operator=(const EntryPoint&) = delete;
};
// Returns `code` and keeps the formatted text for emGetErrorDetail.
__attribute__((format(printf, 2, 3))) emError_t fail(emError_t code,
                                                      const char* format,
                                                      ...);
// The one place that says what is wrong with a device index: every layer above
// (the device guard, the hooks, the Python device module) reports this text.
emError_t invalid_device(int device);

// No C++ exception may cross the C API. The driver's own bookkeeping can only
// throw std::bad_alloc, and running out of host memory is what
// emErrorMemoryAllocation means anyway.
template <typename Fn>
emError_t translate_exceptions(Fn&& fn) {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return emErrorMemoryAllocation;
  } catch (const std::system_error& e) { // a worker thread did not start
    return fail(emErrorMemoryAllocation, "cannot start a stream worker: %s",
                e.what());
  }
}

// ---------------------------------------------------------------------------
// Devices (device.cpp). Inline: read on every launch and allocation, and a
// constant-initialized inline thread_local needs no per-access TLS wrapper.

inline thread_local int current_device = 0;

inline bool valid_device(int device) {
  return device >= 0 && device < kNumDevices;
}

// ---------------------------------------------------------------------------
// Device memory (memory.cpp; fork.cpp remaps it in a forked child).

// The address space of all devices: two views of every device's memfd, each
// followed by the devices' reservable address space (vmm.cpp), where pages of
// the file are mapped on demand:
//   [ file 0 | file 1 | space 0 | space 1 ]  inaccessible
//   [ file 0 | file 1 | space 0 | space 1 ]  read/write, `offset` bytes later
struct Region {
  size_t capacity = 0;  // per device, whole pages
  size_t va_size = 0;   // reservable address space per device
  char* base = nullptr; // the inaccessible view; nullptr if setup failed
  ptrdiff_t offset = 0; // read/write view minus inaccessible view
  std::array<int, kNumDevices> fds{};

  char* device_base(int device) const {
    return base + static_cast<size_t>(device) * capacity;
  }
  char* va_base(int device) const {
    return base + kNumDevices * capacity +
        static_cast<size_t>(device) * va_size;
  }
  size_t span() const { return 2 * kNumDevices * (capacity + va_size); }
  bool contains(uintptr_t p, size_t count) const {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
    return base != nullptr && p < lo + span() && p + count > lo;
  }
};

// Maps device `device`'s file `fd` into both views (MAP_FIXED replaces
// whatever was there: the reservation, or an inherited mapping after fork).
bool map_views(const Region& r, int device, int fd);
// A new, sparse memfd of `capacity` bytes for `device`; -1 on failure.
int new_device_file(int device, size_t capacity);

// The free ranges of one device, as byte offsets into its file.
struct FreeList {
  std::map<size_t, size_t> ranges; // begin -> length, disjoint, coalesced

  // First fit. Returns false if no free range holds `length` bytes.
  bool take(size_t length, size_t* begin);
  void give_back(size_t begin, size_t length);
};

// One device allocation: a page-aligned range of its device's file. The
// registry holds one reference; a copy or kernel using it holds another, so
// an emFree racing with the work cannot hand the range to a new allocation
// (or punch its pages) before the work ends. The last reference returns the
// range, through the destructor.
struct Allocation {
  Allocation(int device, size_t size, size_t mapped_size, size_t file_offset,
             char* base)
      : device(device),
        size(size),
        mapped_size(mapped_size),
        file_offset(file_offset),
        base(base) {}
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation();

  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(base); }
  uintptr_t end() const { return begin() + size; }

  const int device;
  const size_t size;        // as requested by the caller
  const size_t mapped_size; // size rounded up to whole pages
  const size_t file_offset; // where the range starts in the device's file
  char* const base;         // device address (inaccessible view)
  // Pages mapped into a reservation by emMemMap (vmm.cpp): base lies in the
  // reservable space, and only emMemUnmap (never emFree) releases them.
  bool mapped = false;
  uint64_t mapping = 0; // which emMemMap call mapped it (they count from 1)
  // A link (link.cpp): base lies in reservable space, file_offset is 0 in a
  // shared-memory object, not in the device's file. Its range is neither
  // punched nor returned to the file's free list; emLinkClose (never emFree)
  // releases it, and it counts in no stats.
  bool link = false;
};
using AllocationPtr = std::shared_ptr<Allocation>;

// An address range taken by emMemAddressReserve (vmm.cpp).
struct Reservation {
  int device = 0;
  size_t size = 0;
};

struct State {
  State();

  // Fixed once constructed, and read without a lock; only a forked child
  // (single-threaded then) replaces the device files, in after_fork_child.
  Region region;

  // Guards allocations and stats. Lock order: mutex, then ranges_mutex.
  std::mutex mutex;
  // Live allocations keyed by base address, ordered so that the allocation
  // containing an interior pointer is found with upper_bound.
  std::map<uintptr_t, AllocationPtr> allocations;
  std::array<emMemStats, kNumDevices> stats{};
  // Reservations by base address, and each device's unreserved space (as
  // offsets from Region::va_base). Guarded by `mutex`.
  std::map<uintptr_t, Reservation> reservations;
  std::array<FreeList, kNumDevices> va_free_lists;

  // Guards free_lists. Separate from `mutex` because the last reference to an
  // allocation may go anywhere, and ~Allocation must not care which locks its
  // caller holds.
  std::mutex ranges_mutex;
  std::array<FreeList, kNumDevices> free_lists;
};

// The memory state, made on first use (which also installs the fork handlers
// of fork.cpp). Never destroyed.
State& state();

inline uintptr_t addr(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr);
}

// The live allocation that contains all of [p, p + count) (with count == 0:
// that contains p), or nullptr. Caller holds State::mutex.
AllocationPtr find_allocation(uintptr_t p, size_t count = 0);

// Mapped pages (vmm.cpp): appends the pieces that together cover
// [p, p + count) without a gap, or returns false. For copies across pieces
// mapped by separate emMemMap calls. Caller holds State::mutex.
bool find_mapped_range(uintptr_t p, size_t count,
                       std::vector<AllocationPtr>& out);
// emErrorInvalidValue for device range [p, p + count) that is not device
// memory; the detail says so when it lies in a reservation's unmapped pages.
// Caller holds State::mutex.
emError_t explain_unmapped(uintptr_t p, size_t count);
// In a forked child: maps the pieces of `device` from its new file `fd`.
// System calls only.
bool remap_pieces(const Region& r, int device, int fd);
// Maps `length` bytes of file `fd` at `file_offset` to device address `at`
// (a reservation's space) in both views.
bool map_piece(const Region& r, char* at, size_t length, int fd,
               size_t file_offset);
// Puts [at, at + length) of reservable space back to reserved (inaccessible,
// no memory behind it) in both views.
bool unmap_piece(const Region& r, char* at, size_t length);

// Where the driver itself reads and writes device address p.
template <typename T>
T* accessible(T* p) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) +
                              state().region.offset);
}

// Validates a copy (emMemcpy, emMemcpyAsync). On success with count > 0,
// `allocs` holds the device side(s), destination first; the references keep
// the ranges from reuse until the caller drops them.
emError_t check_copy(void* dst, const void* src, size_t count,
                     emMemcpyKind kind, std::vector<AllocationPtr>& allocs);
// The addresses a copy of `kind` really writes and reads (device sides
// through the read/write view).
void* copy_target(void* dst, emMemcpyKind kind);
const void* copy_source(const void* src, emMemcpyKind kind);

// ---------------------------------------------------------------------------
// Kernels (launch.cpp). True on the thread running a kernel's fn (nested
// launches included): waiting calls refuse there, and host work inside a
// kernel runs at once.

inline thread_local int kernel_depth = 0;

struct Stream;
// On a stream's worker thread, while it runs an asynchronous kernel
// (emLaunchKernelAsync): that stream, which emKernelFail marks failed.
// nullptr everywhere else.
inline thread_local Stream* worker_stream = nullptr;

// Marks the thread as running a kernel (kernel_depth) for fn's duration.
struct KernelScope {
  KernelScope() { ++kernel_depth; }
  ~KernelScope() { --kernel_depth; }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};

// ---------------------------------------------------------------------------
// Streams (stream.cpp) and sync events (event.cpp).

using Clock = std::chrono::steady_clock;

struct SyncEvent {
  SyncEvent(emSyncEvent_t id, int device, unsigned int flags)
      : id(id), device(device), timing(!(flags & emSyncEventDisableTiming)) {}
  const emSyncEvent_t id;
  const int device;
  const bool timing;
  // Generations: `recorded` counts emSyncEventRecord calls; `completed` is
  // the newest generation a worker (or an idle stream, at once) has reached,
  // at `time`. Query, synchronize and waits look at the generation that was
  // the latest when they were called.
  uint64_t recorded = 0;
  uint64_t completed = 0;
  Clock::time_point time{};
  // The failure (emKernelFail) of the stream that reached generation
  // `completed`, taken when it reached it: synchronize and waits pass it on.
  bool failed = false;
  std::string failure;
};
using SyncEventPtr = std::shared_ptr<SyncEvent>;

// What the host call that issues work knows for its activity record
// (tracer.cpp). start_ns == 0: activities were off at the issue.
struct ActivityIssue {
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  uint64_t thread = 0;
  uint64_t correlation = 0;
};

struct Op {
  enum Kind { kCopy, kSleep, kRecord, kWait, kKernel } kind = kCopy;
  uint64_t seq = 0; // position in its stream, from 1
  // kCopy
  void* to = nullptr;
  const void* from = nullptr;
  size_t count = 0;
  std::vector<AllocationPtr> allocs; // keeps freed ranges from reuse
                                     // (kCopy, kKernel)
  // kKernel: fn(arg), run by the worker; `name` for its activity record
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
  std::string name;
  bool named = false;
  // kSleep
  uint64_t microseconds = 0;
  // kRecord, kWait
  SyncEventPtr event;
  uint64_t generation = 0;
  // Queued while activities were on (tracer.cpp): who issued it.
  ActivityIssue issue;
  emMemcpyKind copy_kind = emMemcpyHostToDevice;
};

struct Capture; // graph.cpp

struct Stream {
  Stream(int device, emStream_t id) : device(device), id(id) {}
  const int device;
  const emStream_t id;
  std::deque<Op> queue; // waiting ops; the front may be an unmet kWait
  uint64_t enqueued = 0; // seq of the latest op queued
  uint64_t done = 0;     // seq of the latest op finished (in order)
  bool running = false;  // the worker has popped an op and runs it
  int host_holds = 0;    // kernels / copies running on host threads
  bool has_worker = false;
  std::condition_variable work; // the worker waits here for runnable work
  Capture* capture = nullptr;   // set while the stream captures a graph
  // Sticky: the first emKernelFail of a kernel on the stream (or a failed
  // event it waited on). Later kernels and copies in order refuse to run.
  bool failed = false;
  std::string failure;

  bool idle() const { return queue.empty() && !running && host_holds == 0; }
};

struct Scheduler {
  std::mutex mutex;
  std::condition_variable progress; // an op finished, or a hold ended
  // Streams are never destroyed, so Stream* stays valid: the thread-local
  // current streams and the workers keep raw pointers.
  std::array<std::vector<Stream*>, kNumDevices> streams; // [0]: default
  std::unordered_map<emStream_t, Stream*> by_id;         // created streams
  emStream_t next_stream = 1;
  std::unordered_map<emSyncEvent_t, SyncEventPtr> events;
  emSyncEvent_t next_event = 1;
  // Set in a forked child: workers are started on its first stream call.
  bool restart_workers = false;

  Scheduler();
};

// The stream and event state, made on first use. Never destroyed.
Scheduler& scheduler();

// Locks the scheduler; in a forked child, the first lock restarts workers
// for the work it inherited.
std::unique_lock<std::mutex> lock_scheduler();

// The rest: caller holds the scheduler mutex, except for current_stream_of.

// Finds stream (device, id), or fails with the detail saying why.
emError_t find_stream(int device, emStream_t id, Stream** out);
// The calling thread's current stream on `device` (valid).
Stream* current_stream_of(int device);
// Queues `op` on `s` and wakes its worker (starting it: may throw
// std::system_error).
void enqueue(Stream* s, Op op);
// Something finished: wake host waiters, and the workers whose stream waits
// at an event.
void notify_progress();
// The error of a wait (synchronize) called inside a kernel.
emError_t no_wait_in_kernel(const char* call);
// emSuccess if `s` is not capturing a graph; else the capture is invalidated
// and the error names `call` (graph.cpp). Caller holds the scheduler mutex.
emError_t capture_violation(Stream* s, const char* call);
// Whether s's capture prohibits a potentially unsafe call (a device
// synchronize) from the calling thread: its capture mode decides.
bool capture_prohibits_unsafe_call(Stream* s);
// Records an asynchronous copy (host addresses: copy_target/copy_source)
// in s's capture; the scheduler's lock is held. Called by emMemcpyAsync.
void capture_copy(Stream* s, void* to, const void* from, size_t count,
                  std::vector<AllocationPtr> allocs);
// Records fn with an owned argument in s's capture (s captures; the
// scheduler's lock is held). Called by emLaunchKernelRecordable.
void capture_owned(Stream* s, void (*fn)(void*), void* owned,
                   void (*destroy)(void*), std::vector<AllocationPtr> allocs,
                   size_t num_buffers, const char* name);

// Finds sync event `id`, or fails with the detail.
emError_t find_event(emSyncEvent_t id, SyncEventPtr* out);
// Marks `generation` of the event completed, now, by stream `s` (whose
// failure, if any, the event takes on).
void complete_record(SyncEvent& event, uint64_t generation, const Stream& s);
// emErrorLaunchFailure with `s`'s failure as the detail. Caller holds the
// scheduler mutex and has checked s.failed.
emError_t launch_failure(const Stream& s);

// Host work in stream order: waits until the streams' earlier work is done,
// then holds them (their workers start nothing queued later) until destroyed.
// Inside a kernel it does nothing: the enclosing launch already waited and
// holds. Kernels (launch.cpp) and synchronous copies (memory.cpp) use it.
class HostWork {
 public:
  HostWork(Stream* a, Stream* b);
  ~HostWork();
  HostWork(const HostWork&) = delete;
  HostWork& operator=(const HostWork&) = delete;

  // emErrorLaunchFailure (with the detail) if a held stream had failed when
  // the wait ended: the work must not run. Else emSuccess.
  emError_t status() const;

 private:
  std::array<Stream*, 2> streams_{};
  bool failed_ = false;
  std::string failure_;
};

// fork() (fork.cpp): the scheduler's part, run before the memory locks are
// taken and after they are released.
void scheduler_before_fork();
void scheduler_after_fork_parent();
void scheduler_after_fork_child();
// Registers fork.cpp's handlers with pthread_atfork (once, from state()).
void install_fork_handlers();

// ---------------------------------------------------------------------------
// The event callback (tracer.cpp).

// Whether `kind` is reported (emSetEventKindEnabled).
bool kind_enabled(emEventKind kind);
// Reports `event` to the installed callback, if its kind is enabled. Call it
// with no driver lock held: the callback may call back into the driver.
void notify(const emEvent& event);
// An event of `kind` with the common fields set, the others zero (-1 for
// peer_device).
emEvent make_event(emEventKind kind, int device, size_t bytes,
                   const void* ptr);
// Guards the callback; fork.cpp holds it across fork().
std::mutex& callback_mutex();

// Activity records (tracer.cpp). Whether an activity callback is installed:
// the one relaxed load that work pays when no profiler runs.
extern std::atomic<bool> activities_on;
inline bool activities_enabled() {
  return activities_on.load(std::memory_order_relaxed);
}
// Wall clock, in nanoseconds since the Unix epoch.
uint64_t now_ns();
// The issue record of a call starting now, on this thread (activities on).
ActivityIssue begin_issue();
// Reports `activity`, its issue fields taken from `issue`, if activities are
// on. Call it with no driver lock held.
void report_activity(emActivity& activity, const ActivityIssue& issue);
// Reports a copy of `bytes` that ran in order on (device, stream) from
// `started` until now.
void report_copy(int device, emStream_t stream, emMemcpyKind kind,
                 size_t bytes, uint64_t started, const ActivityIssue& issue,
                 int async = 0);
// Reports queued work of `kind` that `s` ran: a sleep from `started` until
// now, an event record reached at `started`.
void report_stream_work(emActivityKind kind, const Stream& s,
                        uint64_t started, const ActivityIssue& issue,
                        emSyncEvent_t event = 0);
// Takes (and clears) the thread's emSetNextLaunchName.
const char* take_launch_name();

} // namespace ember::driver::detail
