// Kernels: emLaunchKernel runs fn on the calling thread; fn reaches device
// memory only through emGetKernelOffset; a buffer freed by the kernel itself
// stays usable until the kernel returns.

#include "selftest.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

struct KernelArgs {
  unsigned char* a; // device address
  size_t n;
  ptrdiff_t offset = 0;
  int device_read_signal = -1;     // host read of a device address, in fn
  int translated_read_signal = -1; // host read through the offset, in fn
  emError_t worker_offset = emSuccess; // emGetKernelOffset off fn's thread
};

void fill_kernel(void* raw) {
  auto* args = static_cast<KernelArgs*>(raw);
  if (emGetKernelOffset(&args->offset) != emSuccess) return;
  unsigned char* a = args->a + args->offset; // where fn may touch `a`
  for (size_t i = 0; i < args->n; ++i) a[i] = static_cast<unsigned char>(i);
  // An emMemcpy issued by the kernel takes device addresses, as always.
  const unsigned char tag = 0xAB;
  emMemcpy(args->a, &tag, 1, emMemcpyHostToDevice);
  a[1] = 0xCD;
  // The device address faults even inside the kernel; the translated one
  // does not (the forked child reads its own copy of device memory).
  args->device_read_signal = host_read_signal(args->a);
  args->translated_read_signal = host_read_signal(a);
  // Threads the kernel starts are not "in the kernel".
  ptrdiff_t ignored = 0;
  std::thread([&] { args->worker_offset = emGetKernelOffset(&ignored); })
      .join();
}

bool ran = false;
void mark_ran(void*) {
  ran = true;
}

} // namespace

void test_kernel_launch() {
  const size_t n = 3 * 4096;
  void* a = nullptr;
  CHECK_OK(emMalloc(&a, n));
  CHECK(host_read_signal(a) == SIGSEGV); // device memory is not host memory

  ptrdiff_t offset = 123;
  CHECK_EM(emGetKernelOffset(&offset), emErrorInvalidValue); // not in a kernel
  CHECK(offset == 123);

  KernelArgs args{static_cast<unsigned char*>(a), n};
  // The same allocation twice (once through an interior pointer) plus a
  // nullptr, which is skipped.
  void* const buffers[] = {a, static_cast<char*>(a) + 100, nullptr};
  CHECK_OK(emLaunchKernel(fill_kernel, &args, buffers, 3));
  CHECK(args.offset != 0);
  CHECK(args.device_read_signal == SIGSEGV);
  CHECK(args.translated_read_signal == 0);
  CHECK(args.worker_offset == emErrorInvalidValue);
  CHECK_EM(emGetKernelOffset(&offset), emErrorInvalidValue); // over again
  CHECK(host_read_signal(a) == SIGSEGV);

  // What the kernel wrote through the offset is what a copy reads back.
  std::vector<unsigned char> back(n);
  CHECK_OK(emMemcpy(back.data(), a, n, emMemcpyDeviceToHost));
  CHECK(back[0] == 0xAB && back[1] == 0xCD && back[2] == 2);
  CHECK(back[n - 1] == static_cast<unsigned char>(n - 1));

  // The read/write view is the driver's: not host memory for a copy either.
  char* translated = static_cast<char*>(a) + args.offset;
  CHECK_EM(emMemcpy(a, translated, 8, emMemcpyHostToDevice),
           emErrorInvalidValue);
  CHECK_EM(emMemcpy(translated, a, 8, emMemcpyDeviceToHost),
           emErrorInvalidValue);
  int on_device = -1;
  CHECK_EM(emPointerGetDevice(translated, &on_device), emErrorInvalidValue);

  // One offset for both devices: a kernel on device 1 gets the same one.
  CHECK_OK(emSetDevice(1));
  void* b = nullptr;
  CHECK_OK(emMalloc(&b, 16));
  static ptrdiff_t offset_on_1 = 0;
  void* const on_1[] = {b};
  CHECK_OK(emLaunchKernel([](void*) { emGetKernelOffset(&offset_on_1); },
                          nullptr, on_1, 1));
  CHECK(offset_on_1 == args.offset);
  CHECK_OK(emFree(b));
  CHECK_OK(emSetDevice(0));

  // Bad launches: fn is not run.
  int on_host = 0;
  void* const bad[] = {a, &on_host};
  CHECK_EM(emLaunchKernel(mark_ran, nullptr, bad, 2), emErrorInvalidValue);
  CHECK(!ran);
  CHECK_EM(emLaunchKernel(nullptr, nullptr, buffers, 1), emErrorInvalidValue);
  CHECK_OK(emLaunchKernel(mark_ran, nullptr, nullptr, 0));
  CHECK(ran);

  CHECK_OK(emFree(a));
}

namespace {

// A kernel frees its own buffer: the launch still holds it, so the kernel can
// keep writing it and a new allocation does not get its range until the
// kernel ends.
struct FreeInKernelArgs {
  void* buffer;
  size_t n;
  void* during = nullptr; // allocated inside the kernel, after the free
  bool ok = false;
};

void free_in_kernel(void* raw) {
  auto* args = static_cast<FreeInKernelArgs*>(raw);
  ptrdiff_t offset = 0;
  args->ok = emGetKernelOffset(&offset) == emSuccess &&
      emFree(args->buffer) == emSuccess &&
      emMalloc(&args->during, args->n) == emSuccess;
  std::memset(static_cast<char*>(args->buffer) + offset, 0x5A, args->n);
}

} // namespace

void test_free_while_kernel_runs() {
  const size_t n = 2 * 4096;
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, n));
  FreeInKernelArgs args{p, n};
  void* const buffers[] = {p};
  CHECK_OK(emLaunchKernel(free_in_kernel, &args, buffers, 1));
  CHECK(args.ok);
  CHECK(args.during != nullptr && args.during != p);
  CHECK_OK(emFree(args.during));
  // After the kernel the range is free again, and first fit hands it out.
  void* again = nullptr;
  CHECK_OK(emMalloc(&again, n));
  CHECK(again == p);
  CHECK_OK(emFree(again));
}
