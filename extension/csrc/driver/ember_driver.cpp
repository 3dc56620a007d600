// The simulated ember driver. See ember_driver.h for the contract.
//
// Device memory is double-mapped. Each device owns one memfd (a file in RAM,
// named "ember-device-N" in /proc/self/maps) of the device's capacity, and the
// driver reserves one stretch of address space holding two views of all the
// devices' files:
//
//   [ device 0 | device 1 ]  PROT_NONE: the addresses emMalloc returns
//   [ device 0 | device 1 ]  read/write: the same pages, kOffset bytes later
//
// Tensors hold addresses in the first view, so a host dereference of a device
// pointer faults. Only emMemcpy and kernels (through emGetKernelOffset) use
// the second view. Nothing changes protection at run time: the previous design
// kept each allocation PROT_NONE and mprotect-ed its pages open around every
// copy and launch, and an mprotect pair on a populated 4 MiB region costs about
// 160 us on a 2-core machine, twice a CPU add of 1M floats. Here a launch costs
// a registry lookup per buffer.
//
// emMalloc carves page-aligned ranges out of a device's file (first fit over a
// list of free ranges that coalesces on release). When an allocation's last
// reference goes (emFree, or the end of a copy or kernel that still used it),
// its pages are punched out of the file, so the memory really goes back to the
// OS, and only then is the range free for reuse.
//
// Streams: every stream is a queue of operations (copies, sleeps, event
// records and waits) that one detached worker thread runs in order. One mutex
// (Scheduler::mutex) guards all stream and event state; workers wait on their
// stream's condition variable for work, and everyone who waits for progress
// (a synchronize, a worker at an event wait) waits on one shared condition
// variable that each finished operation notifies. Kernels and synchronous
// copies run on the host thread that issued them: they wait for their
// stream's earlier work, then "hold" the stream (host_holds) so its worker
// starts nothing queued later until they are done.

#include "ember_driver.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <system_error>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

namespace ember::driver::detail {

constexpr int kNumDevices = 2;
// Simulated capacity per device, so tests can provoke OOM deterministically.
// EMBER_DEVICE_MEMORY_BYTES (read once, at the first driver call) overrides it.
constexpr size_t kDeviceCapacity = size_t{4} << 30;

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

size_t round_up_to_page(size_t n) {
  const size_t page = page_size();
  return (n + page - 1) / page * page;
}

// The per-device capacity: kDeviceCapacity, or the environment's value in
// bytes (rounded up to whole pages). A value that is not a positive integer is
// reported once and ignored.
size_t configured_capacity() {
  const char* text = std::getenv("EMBER_DEVICE_MEMORY_BYTES");
  if (text == nullptr || *text == '\0') return kDeviceCapacity;
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(text, &end, 10);
  // Keep the whole reservation (2 views x 2 devices) far below 2^47 bytes.
  constexpr unsigned long long kMax = 1ULL << 40;
  if (text[0] < '0' || text[0] > '9' || errno != 0 || *end != '\0' ||
      value == 0 || value > kMax) {
    std::fprintf(stderr,
                 "ember driver: ignoring EMBER_DEVICE_MEMORY_BYTES=\"%s\" "
                 "(expected bytes, 1..%llu); each device has %zu bytes\n",
                 text, kMax, kDeviceCapacity);
    return kDeviceCapacity;
  }
  return round_up_to_page(static_cast<size_t>(value));
}

// The address space of all devices: two views of every device's memfd.
struct Region {
  size_t capacity = 0;  // per device, whole pages
  char* base = nullptr; // the inaccessible view; nullptr if setup failed
  ptrdiff_t offset = 0; // read/write view minus inaccessible view
  std::array<int, kNumDevices> fds{};

  char* device_base(int device) const {
    return base + static_cast<size_t>(device) * capacity;
  }
  size_t span() const { return 2 * kNumDevices * capacity; }
  bool contains(uintptr_t p, size_t count) const {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
    return base != nullptr && p < lo + span() && p + count > lo;
  }
};

// Maps device `device`'s file `fd` into both views (MAP_FIXED replaces
// whatever was there: the reservation, or an inherited mapping after fork).
bool map_views(const Region& r, int device, int fd) {
  char* none = r.device_base(device);
  char* rw = none + r.offset;
  return mmap(none, r.capacity, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, 0) !=
             MAP_FAILED &&
      mmap(rw, r.capacity, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           0) != MAP_FAILED &&
      // Gigabytes of device memory have no place in a core dump.
      madvise(none, r.capacity, MADV_DONTDUMP) == 0 &&
      madvise(rw, r.capacity, MADV_DONTDUMP) == 0;
}

int new_device_file(int device, size_t capacity) {
  char name[32];
  std::snprintf(name, sizeof(name), "ember-device-%d", device);
  const int fd = memfd_create(name, MFD_CLOEXEC);
  if (fd < 0) return -1;
  // Sparse: pages exist only once written.
  if (ftruncate(fd, static_cast<off_t>(capacity)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

Region make_region() {
  Region r;
  r.capacity = configured_capacity();
  r.fds.fill(-1);
  const size_t views = kNumDevices * r.capacity;
  // Reserve both views in one piece, so the offset is the same for every
  // device: the read/write view starts right after the inaccessible one.
  void* base = mmap(nullptr, 2 * views, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base == MAP_FAILED) {
    std::perror("ember driver: cannot reserve device address space");
    return r;
  }
  r.base = static_cast<char*>(base);
  r.offset = static_cast<ptrdiff_t>(views);
  for (int d = 0; d < kNumDevices; ++d) {
    r.fds[d] = new_device_file(d, r.capacity);
    if (r.fds[d] < 0 || !map_views(r, d, r.fds[d])) {
      std::perror("ember driver: cannot map device memory");
      munmap(base, 2 * views);
      for (int fd : r.fds) {
        if (fd >= 0) close(fd);
      }
      r.base = nullptr;
      r.fds.fill(-1);
      return r;
    }
  }
  return r;
}

// The free ranges of one device, as byte offsets into its file.
struct FreeList {
  std::map<size_t, size_t> ranges; // begin -> length, disjoint, coalesced

  // First fit. Returns false if no free range holds `length` bytes.
  bool take(size_t length, size_t* begin) {
    for (auto it = ranges.begin(); it != ranges.end(); ++it) {
      if (it->second < length) continue;
      *begin = it->first;
      const size_t rest = it->second - length;
      ranges.erase(it);
      if (rest > 0) ranges.emplace(*begin + length, rest);
      return true;
    }
    return false;
  }

  void give_back(size_t begin, size_t length) {
    auto next = ranges.lower_bound(begin);
    if (next != ranges.end() && begin + length == next->first) {
      length += next->second;
      next = ranges.erase(next);
    }
    if (next != ranges.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == begin) {
        prev->second += length;
        return;
      }
    }
    ranges.emplace_hint(next, begin, length);
  }
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
};
using AllocationPtr = std::shared_ptr<Allocation>;

struct State {
  State() : region(make_region()) {
    for (FreeList& list : free_lists) {
      if (region.base != nullptr) list.ranges.emplace(0, region.capacity);
    }
  }

  // Fixed once constructed, and read without a lock; only a forked child
  // (single-threaded then) replaces the device files, in after_fork_child.
  Region region;

  // Guards allocations and stats. Lock order: mutex, then ranges_mutex.
  std::mutex mutex;
  // Live allocations keyed by base address, ordered so that the allocation
  // containing an interior pointer is found with upper_bound.
  std::map<uintptr_t, AllocationPtr> allocations;
  std::array<emMemStats, kNumDevices> stats{};

  // Guards free_lists. Separate from `mutex` because the last reference to an
  // allocation may go anywhere, and ~Allocation must not care which locks its
  // caller holds.
  std::mutex ranges_mutex;
  std::array<FreeList, kNumDevices> free_lists;
};

State& state();

Allocation::~Allocation() {
  State& s = state();
  // Return the pages to the OS first, so that the range is empty (reads as
  // zeros) before anyone can be given it again. In a forked child that could
  // not make its own copy of device memory, the file is the parent's: leave it.
  const int fd = s.region.fds[device];
  if (fd >= 0) {
    (void)fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(file_offset),
                    static_cast<off_t>(mapped_size));
  }
  std::lock_guard<std::mutex> lock(s.ranges_mutex);
  s.free_lists[device].give_back(file_offset, mapped_size);
}

// fork() gives the child a copy of host memory but, since the device files are
// MAP_SHARED, the parent's device memory itself: the child's copies, kernels
// and frees would land in the parent's tensors. So the child copies the device
// files' data into files of its own and maps those in their place, as if device
// memory were copied on fork like the rest of the process. The locks are taken
// around fork() so that the child's copies of them are consistent; before
// them, the streams are drained (scheduler_before_fork), so that the copy
// holds the results of all work queued before the fork.
void scheduler_before_fork();
void scheduler_after_fork_parent();
void scheduler_after_fork_child();
std::mutex& callback_mutex();

void before_fork() {
  scheduler_before_fork(); // lock order: scheduler, mutex, ranges_mutex
  state().mutex.lock();
  state().ranges_mutex.lock();
  callback_mutex().lock(); // a notify() on another thread holds it briefly
}

void after_fork_parent() {
  callback_mutex().unlock();
  state().ranges_mutex.unlock();
  state().mutex.unlock();
  scheduler_after_fork_parent();
}

// Copies the data (not the holes) of `from` into `to`, reading through the
// read/write view at `rw`. Only system calls: the child of a multithreaded
// process may not allocate.
bool copy_file_data(int from, int to, const char* rw, size_t capacity) {
  off_t pos = 0;
  while (static_cast<size_t>(pos) < capacity) {
    const off_t data = lseek(from, pos, SEEK_DATA);
    if (data < 0) return errno == ENXIO; // ENXIO: no data after pos
    off_t hole = lseek(from, data, SEEK_HOLE);
    if (hole < 0) return false;
    for (off_t at = data; at < hole;) {
      const ssize_t n = pwrite(to, rw + at, static_cast<size_t>(hole - at), at);
      if (n <= 0) return false;
      at += n;
    }
    pos = hole;
  }
  return true;
}

void after_fork_child() {
  State& s = state();
  Region& region = s.region;
  for (int d = 0; d < kNumDevices && region.base != nullptr; ++d) {
    const int inherited = region.fds[d];
    if (inherited < 0) continue;
    const int own = new_device_file(d, region.capacity);
    if (own >= 0 &&
        copy_file_data(inherited, own, region.device_base(d) + region.offset,
                       region.capacity) &&
        map_views(region, d, own)) {
      region.fds[d] = own;
    } else {
      // Best effort: keep sharing the parent's memory, but never punch it.
      if (own >= 0) close(own);
      region.fds[d] = -1;
      static const char msg[] =
          "ember driver: forked child shares device memory with its parent\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    }
    close(inherited);
  }
  callback_mutex().unlock();
  s.ranges_mutex.unlock();
  s.mutex.unlock();
  scheduler_after_fork_child();
}

State& state() {
  // Deliberately never destroyed: callers above us (allocators, tensors held
  // by other static objects) may still call emFree during static destruction.
  static State* const instance = [] {
    State* s = new State();
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
    return s;
  }();
  return *instance;
}

thread_local int current_device = 0;

bool valid_device(int device) {
  return device >= 0 && device < kNumDevices;
}

// What went wrong in this thread's latest failed call, for emGetErrorDetail.
// The detail belongs to one error code: a later failure with another code
// (or a call that clears it) does not show stale text.
struct ErrorDetail {
  emError_t code = emSuccess;
  char text[192] = "";
};
thread_local ErrorDetail error_detail;

void clear_detail() {
  error_detail.code = emSuccess;
}

__attribute__((format(printf, 2, 3))) emError_t fail(emError_t code,
                                                      const char* format,
                                                      ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(error_detail.text, sizeof(error_detail.text), format, args);
  va_end(args);
  error_detail.code = code;
  return code;
}

// The one place that says what is wrong with a device index: every layer above
// (the device guard, the hooks, the Python device module) reports this text.
emError_t invalid_device(int device) {
  return fail(emErrorInvalidDevice,
              "device index %d is out of range: there are %d ember devices "
              "(0..%d)",
              device, kNumDevices, kNumDevices - 1);
}

uintptr_t addr(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr);
}

// The live allocation that contains all of [p, p + count) (with count == 0:
// that contains p), or nullptr. Caller holds the mutex.
AllocationPtr find_allocation(uintptr_t p, size_t count = 0) {
  const auto& allocations = state().allocations;
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  const AllocationPtr& alloc = std::prev(it)->second;
  if (p >= alloc->end() || count > alloc->end() - p) return nullptr;
  return alloc;
}

// Checks one side of a copy against what the copy kind claims: a device range
// must lie inside one live allocation (appended to `allocs`), a host range
// must not touch the device views at all (even unallocated pages there fault,
// and the read/write view is the driver's alone). Caller holds the mutex.
bool check_copy_side(const void* ptr, size_t count, bool on_device,
                     std::vector<AllocationPtr>& allocs) {
  if (!on_device) return !state().region.contains(addr(ptr), count);
  AllocationPtr alloc = find_allocation(addr(ptr), count);
  if (!alloc) return false;
  allocs.push_back(std::move(alloc));
  return true;
}

// Where the driver itself reads and writes device address p.
template <typename T>
T* accessible(T* p) {
  using Byte = std::conditional_t<std::is_const_v<T>, const char, char>;
  return reinterpret_cast<T*>(reinterpret_cast<Byte*>(p) +
                              state().region.offset);
}

// The event callback lives under its own mutex, not State::mutex: it is
// copied out under the lock and called after it is released, so a callback
// may call back into the driver (or replace itself) without deadlocking.
struct CallbackSlot {
  std::mutex mutex;
  emEventCallback callback = nullptr;
  void* user = nullptr;
};

CallbackSlot& callback_slot() {
  static CallbackSlot* const instance = new CallbackSlot(); // see state()
  return *instance;
}

std::mutex& callback_mutex() {
  return callback_slot().mutex;
}

// The kinds reported (emSetEventKindEnabled); kinds 0..3 start enabled.
std::atomic<uint32_t> enabled_kinds{0xFu};

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

// True on the thread running a kernel's fn (nested launches included).
thread_local int kernel_depth = 0;
struct KernelScope {
  KernelScope() { ++kernel_depth; }
  ~KernelScope() { --kernel_depth; }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};

// Validates a copy (emMemcpy, emMemcpyAsync). On success with count > 0,
// `allocs` holds the device side(s), destination first; the references keep
// the ranges from reuse until the caller drops them.
emError_t check_copy(void* dst, const void* src, size_t count,
                     emMemcpyKind kind, std::vector<AllocationPtr>& allocs) {
  if (kind != emMemcpyHostToDevice && kind != emMemcpyDeviceToHost &&
      kind != emMemcpyDeviceToDevice) {
    return emErrorInvalidValue;
  }
  if (count == 0) return emSuccess;
  if (dst == nullptr || src == nullptr || count > UINTPTR_MAX - addr(dst) ||
      count > UINTPTR_MAX - addr(src)) {
    return emErrorInvalidValue;
  }
  // Look up (may allocate, so inside translate_exceptions).
  return translate_exceptions([&] {
    std::lock_guard<std::mutex> lock(state().mutex);
    const bool ok =
        check_copy_side(dst, count, kind != emMemcpyDeviceToHost, allocs) &&
        check_copy_side(src, count, kind != emMemcpyHostToDevice, allocs);
    return ok ? emSuccess : emErrorInvalidValue;
  });
}

void* copy_target(void* dst, emMemcpyKind kind) {
  return kind == emMemcpyDeviceToHost ? dst : accessible(dst);
}

const void* copy_source(const void* src, emMemcpyKind kind) {
  return kind == emMemcpyHostToDevice ? src : accessible(src);
}

// ---------------------------------------------------------------------------
// Streams and sync events.

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
};
using SyncEventPtr = std::shared_ptr<SyncEvent>;

struct Op {
  enum Kind { kCopy, kSleep, kRecord, kWait } kind = kCopy;
  uint64_t seq = 0; // position in its stream, from 1
  // kCopy
  void* to = nullptr;
  const void* from = nullptr;
  size_t count = 0;
  std::vector<AllocationPtr> allocs; // keeps freed ranges from reuse
  // kSleep
  uint64_t microseconds = 0;
  // kRecord, kWait
  SyncEventPtr event;
  uint64_t generation = 0;
};

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

  bool idle() const { return queue.empty() && !running && host_holds == 0; }
};

constexpr size_t kMaxStreamsPerDevice = 1024;

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

  Scheduler() {
    for (int d = 0; d < kNumDevices; ++d) {
      streams[d].push_back(new Stream(d, 0));
    }
  }
};

Scheduler& scheduler() {
  static Scheduler* const instance = [] {
    state(); // registers the fork handlers, which drain the streams
    return new Scheduler(); // never destroyed: see state()
  }();
  return *instance;
}

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

bool wait_met(const Op& op) {
  return op.event->completed >= op.generation;
}

// Caller holds the scheduler mutex. Something finished: wake host waiters,
// and the workers whose stream waits at an event.
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

// Caller holds the scheduler mutex.
void complete_record(SyncEvent& event, uint64_t generation) {
  if (generation > event.completed) {
    event.completed = generation;
    event.time = Clock::now();
  }
}

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
      complete_record(*op.event, op.generation);
    } else if (op.kind != Op::kWait) {
      lock.unlock();
      if (op.kind == Op::kCopy) {
        std::memmove(op.to, op.from, op.count);
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(op.microseconds));
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

// Caller holds the scheduler mutex. Finds stream (device, id), or fails with
// the detail saying why.
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

emError_t unrecorded(const SyncEvent& event) {
  return fail(emErrorInvalidValue,
              "event %lld (ember device %d) has never been recorded",
              static_cast<long long>(event.id), event.device);
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

// Caller holds the scheduler mutex (through `lock`). Queues `op` on `s`.
void enqueue(Stream* s, Op op) {
  op.seq = ++s->enqueued;
  s->queue.push_back(std::move(op));
  wake(s);
}

// Host work in stream order: waits until the streams' earlier work is done,
// then holds them (their workers start nothing new) until destroyed. Inside
// a kernel it does nothing: the enclosing launch already waited and holds.
class HostWork {
 public:
  HostWork(Stream* a, Stream* b) {
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
      if (s == nullptr) continue;
      ++s->host_holds;
      held_streams.push_back(s); // reserved above: cannot throw
    }
  }
  ~HostWork() {
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
  HostWork(const HostWork&) = delete;
  HostWork& operator=(const HostWork&) = delete;

 private:
  std::array<Stream*, 2> streams_{};
};

// fork(): see the header. The parent waits until every stream is idle or
// cannot progress (held by a host kernel, or at an event wait not yet met),
// then keeps the scheduler locked across fork().
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

const char* emGetErrorString(emError_t error) {
  switch (error) {
    case emSuccess:
      return "no error";
    case emErrorInvalidDevice:
      return "invalid device ordinal";
    case emErrorInvalidValue:
      return "invalid argument";
    case emErrorMemoryAllocation:
      return "out of memory";
  }
  return "unknown ember error";
}

const char* emGetErrorDetail(emError_t error) {
  return error != emSuccess && error == error_detail.code ? error_detail.text
                                                          : "";
}

emError_t emGetDeviceCount(int* count) {
  clear_detail();
  if (count == nullptr) return emErrorInvalidValue;
  *count = kNumDevices;
  return emSuccess;
}

emError_t emGetDevice(int* device) {
  clear_detail();
  if (device == nullptr) return emErrorInvalidValue;
  *device = current_device;
  return emSuccess;
}

emError_t emSetDevice(int device) {
  if (!valid_device(device)) return invalid_device(device);
  current_device = device;
  return emSuccess;
}

emError_t emDeviceSynchronize(int device) {
  if (!valid_device(device)) return invalid_device(device);
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    // What was queued before the call, on every stream of the device.
    std::vector<std::pair<Stream*, uint64_t>> targets;
    for (Stream* s : sc.streams[device]) {
      if (s->done < s->enqueued) targets.emplace_back(s, s->enqueued);
    }
    if (targets.empty()) return emSuccess;
    if (kernel_depth > 0) return no_wait_in_kernel("emDeviceSynchronize");
    sc.progress.wait(lock, [&] {
      for (const auto& [s, target] : targets) {
        if (s->done < target) return false;
      }
      return true;
    });
    return emSuccess;
  });
}

emError_t emMalloc(void** ptr, size_t size) {
  clear_detail();
  if (ptr == nullptr) return emErrorInvalidValue;
  *ptr = nullptr;
  if (size == 0) return emSuccess;
  const int device = current_device;
  const emError_t status = translate_exceptions([&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    // Also true when the region could not be set up (capacity 0 then).
    if (s.region.base == nullptr || size > s.region.capacity) {
      return emErrorMemoryAllocation;
    }
    // size <= capacity, so rounding up cannot overflow.
    const size_t mapped_size = round_up_to_page(size);
    size_t file_offset = 0;
    {
      std::lock_guard<std::mutex> ranges_lock(s.ranges_mutex);
      if (!s.free_lists[device].take(mapped_size, &file_offset)) {
        return emErrorMemoryAllocation;
      }
    }
    char* base = s.region.device_base(device) + file_offset;
    std::shared_ptr<Allocation> alloc;
    try {
      alloc = std::make_shared<Allocation>(device, size, mapped_size,
                                           file_offset, base);
    } catch (const std::bad_alloc&) {
      std::lock_guard<std::mutex> ranges_lock(s.ranges_mutex);
      s.free_lists[device].give_back(file_offset, mapped_size);
      throw;
    }
    // If emplace throws, `alloc` gives the range back as it unwinds.
    s.allocations.emplace(addr(base), std::move(alloc));

    emMemStats& stats = s.stats[device];
    stats.bytes_in_use += size;
    stats.peak_bytes_in_use =
        std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    ++stats.live_allocations;
    ++stats.total_allocations;
    *ptr = base;
    return emSuccess;
  });
  if (status == emSuccess) {
    notify(make_event(emEventMalloc, device, size, *ptr));
  }
  return status;
}

emError_t emFree(void* ptr) {
  clear_detail();
  if (ptr == nullptr) return emSuccess;
  // Declared before the lock so that returning the range (if this is the last
  // reference) happens after the mutex is released.
  AllocationPtr alloc;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocations.find(addr(ptr)); // exact base only, not interior
    if (it == s.allocations.end()) return emErrorInvalidValue;
    alloc = std::move(it->second);
    s.allocations.erase(it);

    emMemStats& stats = s.stats[alloc->device];
    stats.bytes_in_use -= alloc->size;
    --stats.live_allocations;
    ++stats.total_frees;
  }
  const int device = alloc->device;
  const size_t size = alloc->size;
  alloc.reset(); // returns the pages now, unless a copy or kernel still runs
  notify(make_event(emEventFree, device, size, ptr));
  return emSuccess;
}

emError_t emPointerGetDevice(const void* ptr, int* device) {
  clear_detail();
  if (ptr == nullptr || device == nullptr) return emErrorInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const AllocationPtr alloc = find_allocation(addr(ptr));
  if (!alloc) return emErrorInvalidValue;
  *device = alloc->device;
  return emSuccess;
}

emError_t emMemcpy(void* dst, const void* src, size_t count,
                   emMemcpyKind kind) {
  clear_detail();
  std::vector<AllocationPtr> allocs;
  const emError_t status = check_copy(dst, src, count, kind, allocs);
  if (status != emSuccess || count == 0) return status;
  // check_copy appended the device side(s): destination first.
  const int device = allocs[0]->device;
  emEvent event = make_event(emEventMemcpy, device, count, dst);
  event.memcpy_kind = kind;
  if (kind == emMemcpyDeviceToDevice) event.peer_device = allocs[1]->device;
  Stream* stream = current_stream_of(device);
  const emError_t ordered = translate_exceptions([&] {
    // In order on the current stream of each device the copy touches.
    HostWork work(stream, current_stream_of(allocs.back()->device));
    std::memmove(copy_target(dst, kind), copy_source(src, kind), count);
    return emSuccess;
  });
  if (ordered != emSuccess) return ordered;
  event.stream = stream->id;
  allocs.clear(); // may return freed ranges: before the callback runs
  notify(event);
  return emSuccess;
}

emError_t emGetKernelOffset(ptrdiff_t* offset) {
  clear_detail();
  if (offset == nullptr || kernel_depth == 0) return emErrorInvalidValue;
  *offset = state().region.offset;
  return emSuccess;
}

emError_t emLaunchKernel(void (*fn)(void* arg), void* arg,
                         void* const* buffers, size_t num_buffers) {
  clear_detail();
  if (fn == nullptr || (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<AllocationPtr> allocs;
  const emError_t status = translate_exceptions([&] {
    allocs.reserve(num_buffers);
    std::lock_guard<std::mutex> lock(state().mutex);
    for (size_t i = 0; i < num_buffers; ++i) {
      if (buffers[i] == nullptr) continue; // e.g. an empty tensor's data
      AllocationPtr alloc = find_allocation(addr(buffers[i]));
      if (!alloc) return emErrorInvalidValue;
      allocs.push_back(std::move(alloc));
    }
    return emSuccess;
  });
  if (status != emSuccess) return status;
  const int device = current_device;
  Stream* stream = current_stream_of(device);
  // No lock is held while fn runs, so fn may call back into the driver
  // (including emFree of its own buffers: `allocs` keeps them usable).
  std::optional<HostWork> work;
  const emError_t ordered = translate_exceptions([&] {
    work.emplace(stream, stream); // in order on the current stream
    return emSuccess;
  });
  if (ordered != emSuccess) return ordered;
  {
    KernelScope scope;
    fn(arg);
  }
  work.reset(); // the stream's later work may start
  allocs.clear();
  emEvent event = make_event(emEventKernelLaunch, device, 0, nullptr);
  event.num_buffers = num_buffers;
  event.stream = stream->id;
  notify(event);
  return emSuccess;
}

emError_t emMemGetStats(int device, emMemStats* stats) {
  clear_detail();
  if (!valid_device(device)) return invalid_device(device);
  if (stats == nullptr) return emErrorInvalidValue;
  std::lock_guard<std::mutex> lock(state().mutex);
  *stats = state().stats[device];
  return emSuccess;
}

emError_t emMemGetInfo(int device, size_t* free, size_t* total) {
  clear_detail();
  if (!valid_device(device)) return invalid_device(device);
  if (free == nullptr || total == nullptr) return emErrorInvalidValue;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.ranges_mutex);
  size_t unused = 0;
  for (const auto& range : s.free_lists[device].ranges) unused += range.second;
  *free = unused;
  *total = s.region.capacity;
  return emSuccess;
}

emError_t emMemResetPeak(int device) {
  if (!valid_device(device)) return invalid_device(device);
  std::lock_guard<std::mutex> lock(state().mutex);
  emMemStats& stats = state().stats[device];
  stats.peak_bytes_in_use = stats.bytes_in_use;
  return emSuccess;
}

emError_t emSetEventCallback(emEventCallback callback, void* user) {
  CallbackSlot& slot = callback_slot();
  std::lock_guard<std::mutex> lock(slot.mutex);
  slot.callback = callback;
  slot.user = user;
  return emSuccess;
}

// Streams and sync events.

emError_t emStreamCreate(int device, emStream_t* stream) {
  clear_detail();
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
  clear_detail();
  if (idle == nullptr) return emErrorInvalidValue;
  std::unique_lock<std::mutex> lock = lock_scheduler();
  Stream* s = nullptr;
  const emError_t status = find_stream(device, stream, &s);
  if (status != emSuccess) return status;
  *idle = s->idle() ? 1 : 0;
  return emSuccess;
}

emError_t emStreamSynchronize(int device, emStream_t stream) {
  clear_detail();
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    const emError_t status = find_stream(device, stream, &s);
    if (status != emSuccess) return status;
    const uint64_t target = s->enqueued;
    if (s->done >= target) return emSuccess;
    if (kernel_depth > 0) return no_wait_in_kernel("emStreamSynchronize");
    sc.progress.wait(lock, [&] { return s->done >= target; });
    return emSuccess;
  });
}

emError_t emGetStream(int device, emStream_t* stream) {
  clear_detail();
  if (!valid_device(device)) return invalid_device(device);
  if (stream == nullptr) return emErrorInvalidValue;
  Stream* s = current_streams[device];
  *stream = s != nullptr ? s->id : 0;
  return emSuccess;
}

emError_t emSetStream(int device, emStream_t stream) {
  clear_detail();
  std::unique_lock<std::mutex> lock = lock_scheduler();
  Stream* s = nullptr;
  const emError_t status = find_stream(device, stream, &s);
  if (status != emSuccess) return status;
  current_streams[device] = s;
  return emSuccess;
}

emError_t emMemcpyAsync(void* dst, const void* src, size_t count,
                        emMemcpyKind kind, int device, emStream_t stream) {
  clear_detail();
  std::vector<AllocationPtr> allocs;
  emError_t status = check_copy(dst, src, count, kind, allocs);
  if (status != emSuccess) return status;
  emEvent event{};
  status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    const emError_t found = find_stream(device, stream, &s);
    if (found != emSuccess || count == 0) return found;
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
    enqueue(s, std::move(op));
    return emSuccess;
  });
  if (status == emSuccess && count > 0) notify(event);
  return status;
}

emError_t emSleepAsync(uint64_t microseconds, int device, emStream_t stream) {
  clear_detail();
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    Stream* s = nullptr;
    const emError_t found = find_stream(device, stream, &s);
    if (found != emSuccess) return found;
    Op op;
    op.kind = Op::kSleep;
    op.microseconds = microseconds;
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

emError_t emSyncEventCreate(int device, emSyncEvent_t* event,
                            unsigned int flags) {
  clear_detail();
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
  clear_detail();
  SyncEventPtr doomed; // released after the lock
  std::unique_lock<std::mutex> lock = lock_scheduler();
  const emError_t status = find_event(event, &doomed);
  if (status == emSuccess) scheduler().events.erase(event);
  lock.unlock();
  return status;
}

emError_t emSyncEventRecord(emSyncEvent_t event, int device,
                            emStream_t stream) {
  clear_detail();
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    Stream* s = nullptr;
    emError_t found = find_event(event, &e);
    if (found == emSuccess) found = find_stream(device, stream, &s);
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
      complete_record(*e, generation);
      notify_progress();
      return emSuccess;
    }
    Op op;
    op.kind = Op::kRecord;
    op.event = std::move(e);
    op.generation = generation;
    enqueue(s, std::move(op));
    return emSuccess;
  });
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
  clear_detail();
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
  clear_detail();
  return translate_exceptions([&] {
    Scheduler& sc = scheduler();
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    const emError_t status = find_event(event, &e);
    if (status != emSuccess) return status;
    if (e->recorded == 0) return unrecorded(*e);
    const uint64_t generation = e->recorded;
    if (e->completed >= generation) return emSuccess;
    if (kernel_depth > 0) return no_wait_in_kernel("emSyncEventSynchronize");
    sc.progress.wait(lock, [&] { return e->completed >= generation; });
    return emSuccess;
  });
}

emError_t emStreamWaitSyncEvent(int device, emStream_t stream,
                                emSyncEvent_t event) {
  clear_detail();
  int event_device = -1;
  const emError_t status = translate_exceptions([&] {
    std::unique_lock<std::mutex> lock = lock_scheduler();
    SyncEventPtr e;
    Stream* s = nullptr;
    emError_t found = find_stream(device, stream, &s);
    if (found == emSuccess) found = find_event(event, &e);
    if (found != emSuccess) return found;
    if (e->recorded == 0) return unrecorded(*e);
    event_device = e->device;
    if (e->completed >= e->recorded) return emSuccess; // nothing to wait for
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
  clear_detail();
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
