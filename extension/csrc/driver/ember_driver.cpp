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

#include "ember_driver.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
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
// around fork() so that the child's copies of them are consistent.
void before_fork() {
  state().mutex.lock();
  state().ranges_mutex.lock();
}

void after_fork_parent() {
  state().ranges_mutex.unlock();
  state().mutex.unlock();
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
  s.ranges_mutex.unlock();
  s.mutex.unlock();
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

// The one place that says what is wrong with a device index: every layer above
// (the device guard, the hooks, the Python device module) reports this text.
thread_local char invalid_device_detail[128] = "";

emError_t invalid_device(int device) {
  std::snprintf(invalid_device_detail, sizeof(invalid_device_detail),
                "device index %d is out of range: there are %d ember devices "
                "(0..%d)",
                device, kNumDevices, kNumDevices - 1);
  return emErrorInvalidDevice;
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

void notify(const emEvent& event) {
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
    case emErrorNotReady:
      return "device not ready";
  }
  return "unknown ember error";
}

const char* emGetErrorDetail(emError_t error) {
  return error == emErrorInvalidDevice ? invalid_device_detail : "";
}

emError_t emGetDeviceCount(int* count) {
  if (count == nullptr) return emErrorInvalidValue;
  *count = kNumDevices;
  return emSuccess;
}

emError_t emGetDevice(int* device) {
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
  // Every copy and kernel finishes before the call that issued it returns:
  // there is nothing to wait for (yet).
  return emSuccess;
}

emError_t emMalloc(void** ptr, size_t size) {
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
  if (kind != emMemcpyHostToDevice && kind != emMemcpyDeviceToHost &&
      kind != emMemcpyDeviceToDevice) {
    return emErrorInvalidValue;
  }
  if (count == 0) return emSuccess;
  if (dst == nullptr || src == nullptr || count > UINTPTR_MAX - addr(dst) ||
      count > UINTPTR_MAX - addr(src)) {
    return emErrorInvalidValue;
  }

  // Look up (may allocate, so inside translate_exceptions), then copy. The
  // references in `allocs` keep the ranges from being reused meanwhile.
  std::vector<AllocationPtr> allocs;
  const emError_t status = translate_exceptions([&] {
    std::lock_guard<std::mutex> lock(state().mutex);
    const bool ok =
        check_copy_side(dst, count, kind != emMemcpyDeviceToHost, allocs) &&
        check_copy_side(src, count, kind != emMemcpyHostToDevice, allocs);
    return ok ? emSuccess : emErrorInvalidValue;
  });
  if (status != emSuccess) return status;
  // check_copy_side appended the device side(s): destination first.
  emEvent event = make_event(emEventMemcpy, allocs[0]->device, count, dst);
  event.memcpy_kind = kind;
  if (kind == emMemcpyDeviceToDevice) event.peer_device = allocs[1]->device;
  void* to = kind == emMemcpyDeviceToHost ? dst : accessible(dst);
  const void* from = kind == emMemcpyHostToDevice ? src : accessible(src);
  // memmove: a device-to-device copy within one allocation may overlap.
  std::memmove(to, from, count);
  allocs.clear(); // may return freed ranges: before the callback runs
  notify(event);
  return emSuccess;
}

emError_t emGetKernelOffset(ptrdiff_t* offset) {
  if (offset == nullptr || kernel_depth == 0) return emErrorInvalidValue;
  *offset = state().region.offset;
  return emSuccess;
}

emError_t emLaunchKernel(void (*fn)(void* arg), void* arg,
                         void* const* buffers, size_t num_buffers) {
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
  // No lock is held while fn runs, so fn may call back into the driver
  // (including emFree of its own buffers: `allocs` keeps them usable).
  {
    KernelScope scope;
    fn(arg);
  }
  allocs.clear();
  emEvent event = make_event(emEventKernelLaunch, current_device, 0, nullptr);
  event.num_buffers = num_buffers;
  notify(event);
  return emSuccess;
}

emError_t emMemGetStats(int device, emMemStats* stats) {
  if (!valid_device(device)) return invalid_device(device);
  if (stats == nullptr) return emErrorInvalidValue;
  std::lock_guard<std::mutex> lock(state().mutex);
  *stats = state().stats[device];
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

// Streams and sync events: declared, not implemented yet (stubs).
emError_t emStreamCreate(int, emStream_t*) { return emErrorInvalidValue; }
emError_t emStreamQuery(int, emStream_t) { return emErrorInvalidValue; }
emError_t emStreamSynchronize(int, emStream_t) { return emErrorInvalidValue; }
emError_t emGetStream(int, emStream_t*) { return emErrorInvalidValue; }
emError_t emSetStream(int, emStream_t) { return emErrorInvalidValue; }
emError_t emMemcpyAsync(void*, const void*, size_t, emMemcpyKind, int,
                        emStream_t) {
  return emErrorInvalidValue;
}
emError_t emSleepAsync(uint64_t, int, emStream_t) {
  return emErrorInvalidValue;
}
emError_t emSyncEventCreate(int, emSyncEvent_t*, unsigned int) {
  return emErrorInvalidValue;
}
emError_t emSyncEventDestroy(emSyncEvent_t) { return emErrorInvalidValue; }
emError_t emSyncEventRecord(emSyncEvent_t, int, emStream_t) {
  return emErrorInvalidValue;
}
emError_t emSyncEventQuery(emSyncEvent_t) { return emErrorInvalidValue; }
emError_t emSyncEventSynchronize(emSyncEvent_t) { return emErrorInvalidValue; }
emError_t emStreamWaitSyncEvent(int, emStream_t, emSyncEvent_t) {
  return emErrorInvalidValue;
}
emError_t emSyncEventElapsedTime(float*, emSyncEvent_t, emSyncEvent_t) {
  return emErrorInvalidValue;
}
emError_t emSetEventKindEnabled(emEventKind, int) {
  return emErrorInvalidValue;
}

} // extern "C"
