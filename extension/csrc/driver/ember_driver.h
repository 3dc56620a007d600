// The ember driver: a simulated accelerator behind a small C API.
//
// This layer knows nothing about PyTorch. It plays the part of a vendor's
// driver library (think libcudart): PyTorch integration code sits on top of
// it and every call into it is checked. The host cannot touch device memory:
// the addresses emMalloc returns lie in pages mapped with no access, so a host
// dereference of a device pointer faults exactly as it would on real
// hardware. The same memory is mapped a second time, read/write, at a fixed
// offset that only the driver's copies and kernels use (emGetKernelOffset):
// kernels run at full speed, and no protection changes per call.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emError {
  emSuccess = 0,
  emErrorInvalidDevice = 1,   // device index out of range
  emErrorInvalidValue = 2,    // null pointer, unknown pointer, bad size
  emErrorMemoryAllocation = 3 // the device (or the host mapping) is full
} emError_t;

typedef enum emMemcpyKind {
  emMemcpyHostToDevice = 0,
  emMemcpyDeviceToHost = 1,
  emMemcpyDeviceToDevice = 2
} emMemcpyKind;

// Per-device memory statistics, in bytes and counts.
typedef struct emMemStats {
  size_t bytes_in_use;      // sum of live allocation sizes (as requested)
  size_t peak_bytes_in_use; // high-water mark of bytes_in_use since reset
  size_t live_allocations;  // number of live allocations
  size_t total_allocations; // emMalloc calls that succeeded, ever
  size_t total_frees;       // emFree calls that succeeded, ever
} emMemStats;

const char* emGetErrorString(emError_t error);
// What exactly was wrong in this thread's latest failed call that returned
// `error` ("" if the driver has nothing to add): for emErrorInvalidDevice, the
// index and the valid range.
const char* emGetErrorDetail(emError_t error);

// Devices. The simulated machine has two ember devices, 0 and 1. The current
// device is per host thread and starts at 0.
emError_t emGetDeviceCount(int* count);
emError_t emGetDevice(int* device);
emError_t emSetDevice(int device);
// Waits until all work issued to `device` has finished.
emError_t emDeviceSynchronize(int device);

// Memory. emMalloc allocates on the current device (page-aligned; size 0
// yields nullptr). It fails with emErrorMemoryAllocation when the device's
// 4 GiB (EMBER_DEVICE_MEMORY_BYTES, read once) hold no free range that large.
// emFree returns the pages to the OS; emFree(nullptr) is a no-op.
// emPointerGetDevice tells which device owns a pointer returned by emMalloc
// (or a pointer inside such an allocation).
emError_t emMalloc(void** ptr, size_t size);
emError_t emFree(void* ptr);
emError_t emPointerGetDevice(const void* ptr, int* device);

// Copies between host and device memory, or between two device buffers (on
// the same or different devices). Synchronous.
emError_t emMemcpy(void* dst, const void* src, size_t count, emMemcpyKind kind);

// Runs fn(arg) "on the device": this is how kernels execute. `buffers` lists
// every allocation fn touches (interior pointers and nullptr are fine); their
// memory is not reused before fn returns, even if freed. fn reaches device
// address p at (char*)p + emGetKernelOffset's offset: p itself faults.
emError_t emLaunchKernel(
    void (*fn)(void* arg),
    void* arg,
    void* const* buffers,
    size_t num_buffers);

// Inside a kernel (on the thread running fn, not on threads fn starts): the
// offset at which the kernel reads and writes device memory, the same for all
// devices. Outside a kernel: emErrorInvalidValue.
emError_t emGetKernelOffset(ptrdiff_t* offset);

emError_t emMemGetStats(int device, emMemStats* stats);
emError_t emMemResetPeak(int device);

// Event callbacks: tools (the book's dispatch trace, a profiler) can watch
// what the driver does. One callback per process; it is called on the thread
// that made the driver call, after the work succeeded, and never while the
// driver holds its internal lock, so the callback may call back into the
// driver. Failed calls and no-ops (emMalloc of 0 bytes, emFree(NULL), a copy
// of 0 bytes) report nothing.
typedef enum emEventKind {
  emEventMalloc = 0,
  emEventFree = 1,
  emEventMemcpy = 2,
  emEventKernelLaunch = 3
} emEventKind;

typedef struct emEvent {
  emEventKind kind;
  // malloc/free: the allocation's device. memcpy: the device side of the
  // copy (H2D: destination, D2H: source, D2D: destination). launch: the
  // current device of the launching thread.
  int device;
  // D2D memcpy: the source device. Otherwise -1.
  int peer_device;
  emMemcpyKind memcpy_kind; // memcpy only
  size_t bytes;             // malloc/free: size as requested; memcpy: count
  size_t num_buffers;       // launch only: buffers handed to the kernel
  const void* ptr;          // malloc/free: the allocation; memcpy: dst
} emEvent;

typedef void (*emEventCallback)(const emEvent* event, void* user);

// Installs `callback` (NULL removes it); `user` is passed back to it. A call
// already running the previous callback on another thread may finish after
// this returns, so a callback must stay valid for the life of the process.
emError_t emSetEventCallback(emEventCallback callback, void* user);

#ifdef __cplusplus
} // extern "C"
#endif
