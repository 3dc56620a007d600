// The ember driver: a simulated accelerator behind a small C API.
//
// This layer knows nothing about PyTorch. It plays the part of a vendor's
// driver library (think libcudart): PyTorch integration code sits on top of
// it and every call into it is checked. Device memory lives in pages that the
// host cannot touch: only the driver's copies and kernel launches open them
// for the duration of the work, so a host dereference of a device pointer
// faults exactly as it would on real hardware.
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

// Devices. The simulated machine has two ember devices, 0 and 1. The current
// device is per host thread and starts at 0.
emError_t emGetDeviceCount(int* count);
emError_t emGetDevice(int* device);
emError_t emSetDevice(int device);

// Memory. emMalloc allocates on the current device; size 0 yields nullptr.
// emFree(nullptr) is a no-op. emPointerGetDevice tells which device owns a
// pointer returned by emMalloc (or a pointer inside such an allocation).
emError_t emMalloc(void** ptr, size_t size);
emError_t emFree(void* ptr);
emError_t emPointerGetDevice(const void* ptr, int* device);

// Copies between host and device memory, or between two device buffers (on
// the same or different devices). Synchronous.
emError_t emMemcpy(void* dst, const void* src, size_t count, emMemcpyKind kind);

// Runs fn(arg) "on the device": the device buffers in `buffers` are readable
// and writable while fn runs, and nowhere else. This is how kernels execute.
emError_t emLaunchKernel(
    void (*fn)(void* arg),
    void* arg,
    void* const* buffers,
    size_t num_buffers);

emError_t emMemGetStats(int device, emMemStats* stats);
emError_t emMemResetPeak(int device);

#ifdef __cplusplus
} // extern "C"
#endif
