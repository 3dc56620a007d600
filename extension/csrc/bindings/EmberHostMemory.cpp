// The host (pinned memory) allocator's statistics and cache, for
// torch.ember.host_memory_stats() and friends (device_module/host_memory.py).
//
// PyTorch binds these to Python for CUDA only (torch._C._cuda_hostMemoryStats),
// so ember exports them with C linkage and the device module calls them
// through ctypes, as it calls the driver. They ask whatever allocator is
// registered for PrivateUse1 (at::getHostAllocator), ember's caching one.
// Not shown in the book.
// ember-book: begin host_memory_stats
#include <ATen/core/CachingHostAllocator.h>
#include <c10/core/DeviceType.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>

namespace {

at::HostAllocator* hostAllocator() {
  return at::getHostAllocator(c10::DeviceType::PrivateUse1);
}

} // namespace

extern "C" {

// The statistics as int64 values in this order (host_memory.py names them):
// for active_requests, active_bytes, allocations, allocated_bytes: current,
// peak, allocated, freed; num_host_alloc, num_host_free; for host_alloc_time
// and host_free_time (microseconds): total, max, min, count. Returns how many
// values there are (26), writing at most `capacity`, or -1 on an error.
int64_t emberHostMemoryStats(int64_t* values, size_t capacity) {
  try {
    const at::HostStats stats = hostAllocator()->get_stats();
    std::array<int64_t, 26> all{};
    size_t n = 0;
    for (const c10::CachingAllocator::Stat* stat :
         {&stats.active_requests, &stats.active_bytes, &stats.allocations,
          &stats.allocated_bytes}) {
      for (const int64_t value :
           {stat->current, stat->peak, stat->allocated, stat->freed}) {
        all[n++] = value;
      }
    }
    all[n++] = stats.num_host_alloc;
    all[n++] = stats.num_host_free;
    for (const at::DurationStat* time :
         {&stats.host_alloc_time, &stats.host_free_time}) {
      for (const int64_t value :
           {time->total, time->max, time->min, time->count}) {
        all[n++] = value;
      }
    }
    for (size_t i = 0; i < n && i < capacity; ++i) {
      values[i] = all[i];
    }
    return static_cast<int64_t>(n);
  } catch (const std::exception&) {
    return -1;
  }
}

// Resets the peak (peak != 0) or the accumulated statistics. 0, or -1.
int emberResetHostMemoryStats(int peak) {
  try {
    if (peak != 0) {
      hostAllocator()->reset_peak_stats();
    } else {
      hostAllocator()->reset_accumulated_stats();
    }
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

// Returns the cached blocks whose copies have finished to the OS. 0, or -1.
int emberEmptyHostCache() {
  try {
    hostAllocator()->empty_cache();
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

} // extern "C"
// ember-book: end host_memory_stats
