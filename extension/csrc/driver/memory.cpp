// Device memory: where the addresses emMalloc returns live, and the calls
// that allocate, free, copy and count it.
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

#include "internal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <utility>

namespace ember::driver::detail {
namespace {

// Simulated capacity per device, so tests can provoke OOM deterministically.
// EMBER_DEVICE_MEMORY_BYTES (read once, at the first driver call) overrides it.
constexpr size_t kDeviceCapacity = size_t{4} << 30;
// Reservable address space per device, in capacities: room for a few
// reservations as large as the device (as CUDA's expandable segments make).
constexpr size_t kReservableCapacities = 8;

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
  // Keep the whole reservation (2 views x 2 devices x (1 + 8) capacities)
  // far below 2^47 bytes.
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

} // namespace

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

namespace {

Region make_region() {
  Region r;
  r.capacity = configured_capacity();
  r.va_size = kReservableCapacities * r.capacity;
  r.fds.fill(-1);
  const size_t views = kNumDevices * (r.capacity + r.va_size);
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

// Checks one side of a copy against what the copy kind claims: a device range
// must lie inside one live allocation (appended to `allocs`), a host range
// must not touch the device views at all (even unallocated pages there fault,
// and the read/write view is the driver's alone). Caller holds the mutex.
bool check_copy_side(const void* ptr, size_t count, bool on_device,
                     std::vector<AllocationPtr>& allocs) {
  if (!on_device) return !state().region.contains(addr(ptr), count);
  AllocationPtr alloc = find_allocation(addr(ptr), count);
  if (alloc) {
    allocs.push_back(std::move(alloc));
    return true;
  }
  // Mapped pages of a reservation may span pieces of separate emMemMap calls.
  return find_mapped_range(addr(ptr), count, allocs);
}

} // namespace

bool FreeList::take(size_t length, size_t* begin) {
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

void FreeList::give_back(size_t begin, size_t length) {
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

Allocation::~Allocation() {
  if (link) return; // emLinkClose gave its address space back (link.cpp)
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

State::State() : region(make_region()) {
  for (FreeList& list : free_lists) {
    if (region.base != nullptr) list.ranges.emplace(0, region.capacity);
  }
  for (FreeList& list : va_free_lists) {
    if (region.base != nullptr) list.ranges.emplace(0, region.va_size);
  }
}

State& state() {
  // Deliberately never destroyed: callers above us (allocators, tensors held
  // by other static objects) may still call emFree during static destruction.
  static State* const instance = [] {
    State* s = new State();
    install_fork_handlers();
    return s;
  }();
  return *instance;
}

AllocationPtr find_allocation(uintptr_t p, size_t count) {
  const auto& allocations = state().allocations;
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return nullptr;
  const AllocationPtr& alloc = std::prev(it)->second;
  if (p >= alloc->end() || count > alloc->end() - p) return nullptr;
  return alloc;
}

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
  // Look up (may allocate, so inside translate_exceptions). A side that
  // spans mapped pieces gives several: the first of each side leads (the
  // callers read allocs[0] and allocs[1]), the others follow.
  return translate_exceptions([&] {
    std::lock_guard<std::mutex> lock(state().mutex);
    std::vector<AllocationPtr> dst_side, src_side;
    const bool dst_on_device = kind != emMemcpyDeviceToHost;
    const bool src_on_device = kind != emMemcpyHostToDevice;
    if (!check_copy_side(dst, count, dst_on_device, dst_side)) {
      return dst_on_device ? explain_unmapped(addr(dst), count)
                           : emErrorInvalidValue;
    }
    if (!check_copy_side(src, count, src_on_device, src_side)) {
      return src_on_device ? explain_unmapped(addr(src), count)
                           : emErrorInvalidValue;
    }
    for (auto* side : {&dst_side, &src_side}) {
      if (!side->empty()) allocs.push_back(side->front());
    }
    for (auto* side : {&dst_side, &src_side}) {
      for (size_t i = 1; i < side->size(); ++i) allocs.push_back((*side)[i]);
    }
    return emSuccess;
  });
}

void* copy_target(void* dst, emMemcpyKind kind) {
  return kind == emMemcpyDeviceToHost ? dst : accessible(dst);
}

const void* copy_source(const void* src, emMemcpyKind kind) {
  return kind == emMemcpyHostToDevice ? src : accessible(src);
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emMalloc(void** ptr, size_t size) {
  const EntryPoint entry;
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
  const EntryPoint entry;
  if (ptr == nullptr) return emSuccess;
  // Declared before the lock so that returning the range (if this is the last
  // reference) happens after the mutex is released.
  AllocationPtr alloc;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.allocations.find(addr(ptr)); // exact base only, not interior
    if (it == s.allocations.end()) return emErrorInvalidValue;
    if (it->second->mapped) {
      return fail(emErrorInvalidValue,
                  "%p is mapped into a reservation: emMemUnmap releases it",
                  ptr);
    }
    if (it->second->link) {
      return fail(emErrorInvalidValue,
                  "%p is a link: emLinkClose releases it", ptr);
    }
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
  const EntryPoint entry;
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
  const EntryPoint entry;
  std::vector<AllocationPtr> allocs;
  const emError_t status = check_copy(dst, src, count, kind, allocs);
  if (status != emSuccess || count == 0) return status;
  // check_copy appended the device side(s): destination first.
  const int device = allocs[0]->device;
  emEvent event = make_event(emEventMemcpy, device, count, dst);
  event.memcpy_kind = kind;
  if (kind == emMemcpyDeviceToDevice) event.peer_device = allocs[1]->device;
  Stream* stream = current_stream_of(device);
  const ActivityIssue issue =
      activities_enabled() ? begin_issue() : ActivityIssue{};
  uint64_t started = 0; // the copy itself, timed if issue.start_ns != 0
  const emError_t ordered = translate_exceptions([&] {
    // In order on the current stream of each device the copy touches.
    const bool d2d = kind == emMemcpyDeviceToDevice;
    Stream* other = current_stream_of(allocs[d2d ? 1 : 0]->device);
    if (kernel_depth == 0) {
      std::unique_lock<std::mutex> lock = lock_scheduler();
      emError_t captured = capture_violation(stream, "emMemcpy");
      if (captured == emSuccess) captured = capture_violation(other, "emMemcpy");
      if (captured != emSuccess) return captured;
    }
    HostWork work(stream, other);
    const emError_t failed = work.status(); // a stream's kernel failed
    if (failed != emSuccess) return failed;
    if (issue.start_ns != 0) started = now_ns();
    std::memmove(copy_target(dst, kind), copy_source(src, kind), count);
    return emSuccess;
  });
  if (ordered != emSuccess) return ordered;
  if (started != 0) {
    report_copy(device, stream->id, kind, count, started, issue);
  }
  event.stream = stream->id;
  allocs.clear(); // may return freed ranges: before the callback runs
  notify(event);
  return emSuccess;
}

emError_t emMemGetStats(int device, emMemStats* stats) {
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  if (stats == nullptr) return emErrorInvalidValue;
  std::lock_guard<std::mutex> lock(state().mutex);
  *stats = state().stats[device];
  return emSuccess;
}

emError_t emMemGetInfo(int device, size_t* free, size_t* total) {
  const EntryPoint entry;
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
  const EntryPoint entry;
  if (!valid_device(device)) return invalid_device(device);
  std::lock_guard<std::mutex> lock(state().mutex);
  emMemStats& stats = state().stats[device];
  stats.peak_bytes_in_use = stats.bytes_in_use;
  return emSuccess;
}

} // extern "C"
