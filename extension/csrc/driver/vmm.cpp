// Address reservations and the pages mapped into them: what a real device
// offers as virtual memory management (CUDA's cuMemAddressReserve, cuMemMap),
// and what lets an allocator grow a segment in place instead of making a new
// one (PyTorch's expandable segments).
//
// Each device has, after the views of the device files, a stretch of address
// space of its own (Region::va_base) that holds no memory. A reservation is a
// range of it. emMemMap takes pages of the device's file (first fit, in
// pieces if no free range is large enough: physical pages need not be
// contiguous) and maps them at the reservation's addresses, in both views,
// as memory.cpp maps the whole file. Each piece is an Allocation like
// emMalloc's, so kernels, copies and the stats treat mapped pages as they
// treat allocated ones, and its last reference punches the pages out of the
// file. emMemUnmap puts the inaccessible, memoryless mapping back.

#include "internal.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

namespace ember::driver::detail {
namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

bool page_multiple(size_t n) {
  return n > 0 && n % page_size() == 0;
}

// The reservation holding all of [p, p + count), or end(). Caller holds
// State::mutex.
auto find_reservation(uintptr_t p, size_t count) {
  auto& reservations = state().reservations;
  auto it = reservations.upper_bound(p);
  if (it == reservations.begin()) return reservations.end();
  --it;
  const uintptr_t end = it->first + it->second.size;
  if (p >= end || count > end - p) return reservations.end();
  return it;
}

// Numbers the emMemMap calls, so that emMemUnmap can tell one call's pieces.
// Guarded by State::mutex.
uint64_t last_mapping = 0;

// Takes `length` bytes of file pages: in one range if one is large enough,
// else from the lowest offsets up. False (nothing taken) if the device has
// fewer free bytes. Caller holds State::ranges_mutex.
bool take_pieces(FreeList& list, size_t length,
                 std::vector<std::pair<size_t, size_t>>& out) {
  size_t free = 0;
  for (const auto& range : list.ranges) free += range.second;
  if (free < length) return false;
  size_t begin = 0;
  if (list.take(length, &begin)) {
    out.emplace_back(begin, length);
    return true;
  }
  while (length > 0) {
    auto it = list.ranges.begin();
    const size_t take = std::min(it->second, length);
    out.emplace_back(it->first, take);
    if (take < it->second) {
      list.ranges.emplace(it->first + take, it->second - take);
    }
    list.ranges.erase(it);
    length -= take;
  }
  return true;
}

} // namespace

// Back to reserved: anonymous, inaccessible, no memory behind it.
bool unmap_piece(const Region& r, char* at, size_t length) {
  for (char* view : {at, at + r.offset}) {
    if (mmap(view, length, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1,
             0) == MAP_FAILED) {
      return false;
    }
  }
  return true;
}

bool map_piece(const Region& r, char* at, size_t length, int fd,
               size_t file_offset) {
  const auto off = static_cast<off_t>(file_offset);
  char* rw = at + r.offset;
  return mmap(at, length, PROT_NONE, MAP_SHARED | MAP_FIXED, fd, off) !=
             MAP_FAILED &&
      mmap(rw, length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd,
           off) != MAP_FAILED &&
      madvise(at, length, MADV_DONTDUMP) == 0 &&
      madvise(rw, length, MADV_DONTDUMP) == 0;
}

bool find_mapped_range(uintptr_t p, size_t count,
                       std::vector<AllocationPtr>& out) {
  const auto& allocations = state().allocations;
  auto it = allocations.upper_bound(p);
  if (it == allocations.begin()) return false;
  --it;
  const uintptr_t end = p + count;
  std::vector<AllocationPtr> found;
  uintptr_t at = p;
  while (true) {
    const AllocationPtr& piece = it->second;
    if (!piece->mapped || at < piece->begin() || at >= piece->end()) {
      return false;
    }
    found.push_back(piece);
    at = piece->end();
    if (at >= end) break;
    if (++it == allocations.end() || it->first != at) return false;
  }
  out.insert(out.end(), found.begin(), found.end());
  return true;
}

emError_t explain_unmapped(uintptr_t p, size_t count) {
  if (find_reservation(p, 1) == state().reservations.end()) {
    return emErrorInvalidValue;
  }
  return fail(emErrorInvalidValue,
              "[%p, +%zu) lies in a reservation but is not wholly mapped "
              "(emMemMap)",
              reinterpret_cast<void*>(p), count);
}

bool remap_pieces(const Region& r, int device, int fd) {
  for (const auto& [base, piece] : state().allocations) {
    if (piece->mapped && piece->device == device &&
        !map_piece(r, piece->base, piece->mapped_size, fd,
                   piece->file_offset)) {
      return false;
    }
  }
  return true;
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emMemGetGranularity(size_t* granularity) {
  const EntryPoint entry;
  if (granularity == nullptr) return emErrorInvalidValue;
  *granularity = page_size();
  return emSuccess;
}

emError_t emMemAddressReserve(void** ptr, size_t size) {
  const EntryPoint entry;
  if (ptr == nullptr) return emErrorInvalidValue;
  *ptr = nullptr;
  if (!page_multiple(size)) {
    return fail(emErrorInvalidValue,
                "a reservation of %zu bytes: not a positive multiple of the "
                "granularity (%zu bytes)",
                size, page_size());
  }
  const int device = current_device;
  return translate_exceptions([&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    size_t offset = 0;
    if (s.region.base == nullptr ||
        !s.va_free_lists[device].take(size, &offset)) {
      return fail(emErrorMemoryAllocation,
                  "device %d has no %zu bytes of address space left to "
                  "reserve",
                  device, size);
    }
    char* base = s.region.va_base(device) + offset;
    s.reservations.emplace(addr(base), Reservation{device, size});
    *ptr = base;
    return emSuccess;
  });
}

emError_t emMemAddressFree(void* ptr) {
  const EntryPoint entry;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.reservations.find(addr(ptr));
  if (ptr == nullptr || it == s.reservations.end()) {
    return fail(emErrorInvalidValue, "%p is not a reservation's base", ptr);
  }
  const auto [device, size] = it->second;
  auto mapped = s.allocations.lower_bound(addr(ptr));
  if (mapped != s.allocations.end() && mapped->first < addr(ptr) + size) {
    return fail(emErrorInvalidValue,
                "the reservation at %p still has pages mapped: emMemUnmap "
                "them first",
                ptr);
  }
  const size_t offset =
      static_cast<size_t>(static_cast<char*>(ptr) - s.region.va_base(device));
  {
    std::lock_guard<std::mutex> ranges_lock(s.ranges_mutex);
    s.va_free_lists[device].give_back(offset, size);
  }
  s.reservations.erase(it);
  return emSuccess;
}

emError_t emMemMap(void* ptr, size_t size) {
  const EntryPoint entry;
  const uintptr_t p = addr(ptr);
  if (!page_multiple(size) || p % page_size() != 0) {
    return fail(emErrorInvalidValue,
                "emMemMap(%p, %zu): address and size must be multiples of "
                "the granularity (%zu bytes)",
                ptr, size, page_size());
  }
  return translate_exceptions([&] {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    auto reservation = find_reservation(p, size);
    if (reservation == s.reservations.end()) {
      return fail(emErrorInvalidValue,
                  "emMemMap: [%p, +%zu) is not inside one reservation", ptr,
                  size);
    }
    // Mapped pieces are the only allocations in reservable space.
    auto next = s.allocations.lower_bound(p);
    const bool overlaps_next =
        next != s.allocations.end() && next->first < p + size;
    const bool overlaps_prev = next != s.allocations.begin() &&
        std::prev(next)->second->mapped && std::prev(next)->second->end() > p;
    if (overlaps_next || overlaps_prev) {
      return fail(emErrorInvalidValue,
                  "emMemMap: [%p, +%zu) has pages mapped already", ptr, size);
    }
    const int device = reservation->second.device;
    const int fd = s.region.fds[device];
    std::vector<std::pair<size_t, size_t>> ranges;
    {
      std::lock_guard<std::mutex> ranges_lock(s.ranges_mutex);
      if (fd < 0 || !take_pieces(s.free_lists[device], size, ranges)) {
        return fail(emErrorMemoryAllocation,
                    "device %d has no %zu bytes free to map", device, size);
      }
    }
    // From here each piece's Allocation owns its file range: a failure
    // drops them, which returns the ranges.
    std::vector<AllocationPtr> pieces;
    const uint64_t mapping = ++last_mapping;
    char* at = static_cast<char*>(ptr);
    bool ok = true;
    for (const auto& [offset, length] : ranges) {
      try {
        pieces.push_back(
            std::make_shared<Allocation>(device, length, length, offset, at));
      } catch (const std::bad_alloc&) {
        std::lock_guard<std::mutex> ranges_lock(s.ranges_mutex);
        for (size_t i = pieces.size(); i < ranges.size(); ++i) {
          s.free_lists[device].give_back(ranges[i].first, ranges[i].second);
        }
        ok = false;
        break;
      }
      pieces.back()->mapped = true;
      pieces.back()->mapping = mapping;
      ok = map_piece(s.region, at, length, fd, offset);
      if (!ok) break;
      at += length;
    }
    if (!ok) {
      for (const AllocationPtr& piece : pieces) {
        (void)unmap_piece(s.region, piece->base, piece->mapped_size);
      }
      pieces.clear(); // back to the free list (takes ranges_mutex)
      return fail(emErrorMemoryAllocation, "emMemMap: cannot map %zu bytes",
                  size);
    }
    for (AllocationPtr& piece : pieces) {
      s.allocations.emplace(piece->begin(), std::move(piece));
    }
    emMemStats& stats = s.stats[device];
    stats.bytes_in_use += size;
    stats.peak_bytes_in_use =
        std::max(stats.peak_bytes_in_use, stats.bytes_in_use);
    return emSuccess;
  });
}

emError_t emMemUnmap(void* ptr, size_t size) {
  const EntryPoint entry;
  const uintptr_t p = addr(ptr);
  std::vector<AllocationPtr> pieces; // dropped after the lock is released
  State& s = state();
  const emError_t status = translate_exceptions([&] {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (!page_multiple(size) || p % page_size() != 0 ||
        find_reservation(p, size) == s.reservations.end()) {
      return fail(emErrorInvalidValue,
                  "emMemUnmap: [%p, +%zu) is not a page-aligned range of "
                  "one reservation",
                  ptr, size);
    }
    // The range must be exactly a run of whole mapped pieces.
    uintptr_t at = p;
    for (auto it = s.allocations.lower_bound(p);
         it != s.allocations.end() && it->first < p + size; ++it) {
      const AllocationPtr& piece = it->second;
      if (it->first != at || piece->end() > p + size) break;
      if (piece.use_count() > 1) {
        return fail(emErrorInvalidValue,
                    "emMemUnmap: pages at %p are still used by queued work "
                    "or a graph (synchronize first)",
                    piece->base);
      }
      at = piece->end();
    }
    // Whole mappings only: no piece of the first or last one left out.
    auto first = s.allocations.find(p);
    auto after = s.allocations.lower_bound(p + size);
    const bool cuts =
        first != s.allocations.end() &&
        ((first != s.allocations.begin() &&
          std::prev(first)->second->mapping == first->second->mapping) ||
         (after != s.allocations.end() &&
          after->second->mapping == std::prev(after)->second->mapping));
    if (at != p + size || cuts) {
      return fail(emErrorInvalidValue,
                  "emMemUnmap: [%p, +%zu) is not wholly mapped, or cuts "
                  "through a mapping",
                  ptr, size);
    }
    auto it = s.allocations.lower_bound(p);
    while (it != s.allocations.end() && it->first < p + size) {
      (void)unmap_piece(s.region, it->second->base, it->second->mapped_size);
      pieces.push_back(std::move(it->second));
      it = s.allocations.erase(it);
    }
    s.stats[pieces.front()->device].bytes_in_use -= size;
    return emSuccess;
  });
  pieces.clear(); // punches the pages: they go back to the OS
  return status;
}

} // extern "C"
