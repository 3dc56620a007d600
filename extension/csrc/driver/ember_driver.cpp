// The simulated ember driver. See ember_driver.h for the contract.
//
// Every device allocation is its own anonymous mapping, kept PROT_NONE while
// idle. Only emMemcpy and emLaunchKernel lift the protection, and only for the
// allocations they were handed and only while the work runs, so any other
// host access to device memory is a SIGSEGV rather than silently working.

#include "ember_driver.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace ember::driver::detail {

constexpr int kNumDevices = 2;
// Simulated capacity per device, so tests can provoke OOM deterministically.
constexpr size_t kDeviceCapacity = size_t{4} << 30;

// One device allocation. Owns its mapping: the pages are unmapped when the
// last reference goes away. The registry holds one reference; an AccessGuard
// holds another while a copy or kernel runs, so an emFree racing with a
// kernel cannot pull the pages out from under it.
struct Allocation {
  Allocation(int device, size_t size, size_t mapped_size)
      : device(device), size(size), mapped_size(mapped_size) {}
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;
  ~Allocation() {
    if (base != nullptr) munmap(base, mapped_size);
  }

  uintptr_t begin() const { return reinterpret_cast<uintptr_t>(base); }
  uintptr_t end() const { return begin() + size; }

  const int device;
  const size_t size;        // as requested by the caller
  const size_t mapped_size; // size rounded up to whole pages
  void* base = nullptr;
  int open_count = 0; // guarded by State::mutex
};
using AllocationPtr = std::shared_ptr<Allocation>;

struct State {
  std::mutex mutex;
  // Live allocations keyed by base address, ordered so that the allocation
  // containing an interior pointer is found with upper_bound.
  std::map<uintptr_t, AllocationPtr> allocations;
  std::array<emMemStats, kNumDevices> stats{};
};

State& state() {
  // Deliberately never destroyed: callers above us (allocators, tensors held
  // by other static objects) may still call emFree during static destruction.
  static State* const instance = new State();
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

// Whether the host range [p, p + count), count > 0, touches any device
// mapping (padding included: it faults just the same). Caller holds the mutex.
bool overlaps_device_memory(uintptr_t p, size_t count) {
  const auto& allocations = state().allocations;
  auto it = allocations.upper_bound(p);
  if (it != allocations.end() && it->first < p + count) return true;
  if (it != allocations.begin()) {
    const Allocation& prev = *std::prev(it)->second;
    return p < prev.begin() + prev.mapped_size;
  }
  return false;
}

// Checks one side of a copy against what the copy kind claims: a device range
// must lie inside one live allocation (appended to `allocs`), a host range
// must not touch device memory at all. Caller holds the mutex.
bool check_copy_side(const void* ptr, size_t count, bool on_device,
                     std::vector<AllocationPtr>& allocs) {
  if (!on_device) return !overlaps_device_memory(addr(ptr), count);
  AllocationPtr alloc = find_allocation(addr(ptr), count);
  if (!alloc) return false;
  allocs.push_back(std::move(alloc));
  return true;
}

// Makes the pages of a set of allocations readable and writable for the
// lifetime of the guard. Opening is reference counted per allocation, so
// guards nest: a buffer passed to a kernel twice, or an emMemcpy issued from
// inside a kernel, keeps the pages open until the outermost guard closes.
// The mutex is held only while flipping protections, never while the guarded
// work (possibly a user kernel that calls back into the driver) runs.
class AccessGuard {
 public:
  explicit AccessGuard(std::vector<AllocationPtr> allocs)
      : allocs_(std::move(allocs)) {
    // Open each allocation once, however often it was passed.
    std::sort(allocs_.begin(), allocs_.end());
    allocs_.erase(std::unique(allocs_.begin(), allocs_.end()), allocs_.end());

    std::lock_guard<std::mutex> lock(state().mutex);
    for (size_t i = 0; i < allocs_.size(); ++i) {
      Allocation& a = *allocs_[i];
      // mprotect can fail (ENOMEM) when the host cannot commit the pages.
      if (a.open_count == 0 &&
          mprotect(a.base, a.mapped_size, PROT_READ | PROT_WRITE) != 0) {
        allocs_.resize(i); // the destructor closes only what was opened
        ok_ = false;
        break;
      }
      ++a.open_count;
    }
  }

  ~AccessGuard() {
    std::lock_guard<std::mutex> lock(state().mutex);
    for (const AllocationPtr& alloc : allocs_) {
      if (--alloc->open_count == 0) {
        // Narrowing protection on a whole mapping we own does not fail in
        // practice; if it ever did, the pages would merely stay accessible.
        (void)mprotect(alloc->base, alloc->mapped_size, PROT_NONE);
      }
    }
  }

  AccessGuard(const AccessGuard&) = delete;
  AccessGuard& operator=(const AccessGuard&) = delete;

  bool ok() const { return ok_; }

 private:
  std::vector<AllocationPtr> allocs_;
  bool ok_ = true;
};

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
    emMemStats& stats = s.stats[device];
    if (size > kDeviceCapacity - stats.bytes_in_use) {
      return emErrorMemoryAllocation;
    }
    // size <= kDeviceCapacity, so rounding up cannot overflow.
    static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t mapped_size = (size + page - 1) / page * page;
    // Create the owner before mapping, so the pages can never leak.
    auto alloc = std::make_shared<Allocation>(device, size, mapped_size);
    void* base = mmap(nullptr, mapped_size, PROT_NONE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) return emErrorMemoryAllocation;
    alloc->base = base;
    s.allocations.emplace(addr(base), std::move(alloc));

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
  // Declared before the lock so that the unmap (if this is the last
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
  notify(make_event(emEventFree, alloc->device, alloc->size, ptr));
  return emSuccess;
}

emError_t emPointerGetDevice(const void* ptr, int* device) {
  if (ptr == nullptr || device == nullptr) return emErrorInvalidValue;
  std::lock_guard<std::mutex> lock(state().mutex);
  AllocationPtr alloc = find_allocation(addr(ptr));
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

  // Look up (may allocate, so inside translate_exceptions), then open, then
  // copy. An emFree racing in between cannot unmap the pages: `allocs` holds
  // references.
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
  {
    AccessGuard guard(std::move(allocs));
    if (!guard.ok()) return emErrorMemoryAllocation;
    // memmove: a device-to-device copy within one allocation may overlap.
    std::memmove(dst, src, count);
  }
  notify(event);
  return emSuccess;
}

namespace {
// True on the thread running a kernel's fn (nested launches included).
thread_local int kernel_depth = 0;
struct KernelScope {
  KernelScope() { ++kernel_depth; }
  ~KernelScope() { --kernel_depth; }
  KernelScope(const KernelScope&) = delete;
  KernelScope& operator=(const KernelScope&) = delete;
};
} // namespace

emError_t emGetKernelOffset(ptrdiff_t* offset) {
  if (offset == nullptr || kernel_depth == 0) return emErrorInvalidValue;
  // Today the launch opens the buffers' own pages, so the offset is 0.
  *offset = 0;
  return emSuccess;
}

emError_t emLaunchKernel(void (*fn)(void* arg), void* arg,
                         void* const* buffers, size_t num_buffers) {
  if (fn == nullptr || (buffers == nullptr && num_buffers > 0)) {
    return emErrorInvalidValue;
  }
  std::vector<AllocationPtr> allocs;
  const emError_t status = translate_exceptions([&] {
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
  // The guard drops the mutex before fn runs, so fn may call back into the
  // driver. fn must not throw; if it did, the guard would still reseal the
  // pages as the exception unwinds.
  {
    AccessGuard guard(std::move(allocs));
    if (!guard.ok()) return emErrorMemoryAllocation;
    KernelScope scope;
    fn(arg);
  }
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

} // extern "C"
