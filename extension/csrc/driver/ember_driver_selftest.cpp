// Smoke test for the ember driver's C API. No PyTorch involved:
//   g++ -std=c++17 -O1 -pthread ember_driver.cpp ember_driver_selftest.cpp
//       -o /tmp/t && /tmp/t [expected per-device capacity in bytes]
// Exits non-zero if any check fails.

#include "ember_driver.h"

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

int failures = 0;

#define CHECK(cond)                                                    \
  do {                                                                 \
    if (!(cond)) {                                                     \
      std::fprintf(stderr, "FAIL line %d: %s\n", __LINE__, #cond);      \
      ++failures;                                                      \
    }                                                                  \
  } while (0)

#define CHECK_EM(expr, expected) CHECK((expr) == (expected))
#define CHECK_OK(expr) CHECK_EM(expr, emSuccess)

emMemStats stats_of(int device) {
  emMemStats s{};
  emMemGetStats(device, &s);
  return s;
}

// Reads one byte at p in a forked child, so a fault cannot take the test
// down. Returns the signal that killed the child, or 0 if the read worked.
int host_read_signal(const void* p) {
  const pid_t pid = fork();
  if (pid == 0) {
    // An expected crash should neither be caught nor dump core.
    signal(SIGSEGV, SIG_DFL);
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    volatile char c = *static_cast<const volatile char*>(p);
    (void)c;
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? WTERMSIG(status) : 0;
}

void test_devices() {
  int count = 0;
  CHECK_OK(emGetDeviceCount(&count));
  CHECK(count == 2);

  int device = -1;
  CHECK_OK(emGetDevice(&device));
  CHECK(device == 0);
  CHECK_OK(emSetDevice(1));
  CHECK_OK(emGetDevice(&device));
  CHECK(device == 1);
  CHECK_EM(emSetDevice(7), emErrorInvalidDevice);
  CHECK_EM(emSetDevice(-1), emErrorInvalidDevice);
  CHECK_OK(emGetDevice(&device));
  CHECK(device == 1); // a failed set leaves the current device alone

  // The current device is per thread: a new thread starts at 0.
  int other = -1;
  std::thread([&] { emGetDevice(&other); }).join();
  CHECK(other == 0);
  CHECK_OK(emSetDevice(0));
}

void test_malloc_free_stats() {
  const emMemStats before = stats_of(0);
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, 1000));
  CHECK(p != nullptr);
  emMemStats s = stats_of(0);
  CHECK(s.bytes_in_use == before.bytes_in_use + 1000);
  CHECK(s.peak_bytes_in_use >= s.bytes_in_use);
  CHECK(s.live_allocations == before.live_allocations + 1);
  CHECK(s.total_allocations == before.total_allocations + 1);

  int device = -1;
  CHECK_OK(emPointerGetDevice(p, &device));
  CHECK(device == 0);
  CHECK_OK(emPointerGetDevice(static_cast<char*>(p) + 999, &device));
  CHECK_EM(emPointerGetDevice(static_cast<char*>(p) + 1000, &device),
           emErrorInvalidValue);
  CHECK_EM(emPointerGetDevice(&device, &device), emErrorInvalidValue);

  CHECK_OK(emSetDevice(1));
  void* q = nullptr;
  CHECK_OK(emMalloc(&q, 64));
  CHECK_OK(emPointerGetDevice(q, &device));
  CHECK(device == 1);
  CHECK(stats_of(1).live_allocations == 1);
  CHECK_OK(emFree(q));
  CHECK_OK(emSetDevice(0));

  CHECK_OK(emFree(p));
  s = stats_of(0);
  CHECK(s.bytes_in_use == before.bytes_in_use);
  CHECK(s.live_allocations == before.live_allocations);
  CHECK(s.total_frees == before.total_frees + 1);
  CHECK(s.peak_bytes_in_use >= before.bytes_in_use + 1000);
  CHECK_OK(emMemResetPeak(0));
  CHECK(stats_of(0).peak_bytes_in_use == before.bytes_in_use);

  // Size 0 yields nullptr and leaves the statistics alone.
  void* z = &device;
  CHECK_OK(emMalloc(&z, 0));
  CHECK(z == nullptr);
  CHECK(stats_of(0).total_allocations == s.total_allocations);

  CHECK_EM(emMalloc(nullptr, 16), emErrorInvalidValue);
  CHECK_OK(emFree(nullptr));
  CHECK_EM(emMemGetStats(2, &s), emErrorInvalidDevice);
  CHECK_EM(emMemResetPeak(-1), emErrorInvalidDevice);
}

void test_copies() {
  const size_t n = 4096 + 13; // spans a page boundary
  std::vector<unsigned char> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) {
    host[i] = static_cast<unsigned char>(i * 7 + 3);
  }
  void* d0 = nullptr;
  void* d1 = nullptr;
  CHECK_OK(emMalloc(&d0, n));
  CHECK_OK(emSetDevice(1));
  CHECK_OK(emMalloc(&d1, n));
  CHECK_OK(emSetDevice(0));

  // Host -> device 0 -> device 1 -> host.
  CHECK_OK(emMemcpy(d0, host.data(), n, emMemcpyHostToDevice));
  CHECK_OK(emMemcpy(d1, d0, n, emMemcpyDeviceToDevice));
  CHECK_OK(emMemcpy(back.data(), d1, n, emMemcpyDeviceToHost));
  CHECK(back == host);

  // Interior pointers, on both the device and the host side.
  char* mid = static_cast<char*>(d0) + 50;
  const char msg[] = "interior pointer";
  char out[sizeof msg] = {};
  CHECK_OK(emMemcpy(mid, msg, sizeof msg, emMemcpyHostToDevice));
  CHECK_OK(emMemcpy(out, mid, sizeof msg, emMemcpyDeviceToHost));
  CHECK(std::memcmp(out, msg, sizeof msg) == 0);
  CHECK_OK(emMemcpy(d0, host.data(), 0, emMemcpyHostToDevice));

  // Bad ranges and mismatched kinds are rejected.
  CHECK_EM(emMemcpy(d0, host.data(), n + 1, emMemcpyHostToDevice),
           emErrorInvalidValue);
  CHECK_EM(emMemcpy(back.data(), static_cast<char*>(d0) + n - 10, 11,
                    emMemcpyDeviceToHost),
           emErrorInvalidValue);
  CHECK_EM(emMemcpy(host.data(), back.data(), 8, emMemcpyHostToDevice),
           emErrorInvalidValue); // dst is not device memory
  CHECK_EM(emMemcpy(d0, d1, 8, emMemcpyHostToDevice),
           emErrorInvalidValue); // src claimed host but is device memory
  CHECK_EM(emMemcpy(d0, host.data(), 8, emMemcpyDeviceToDevice),
           emErrorInvalidValue);
  CHECK_EM(emMemcpy(d0, nullptr, 8, emMemcpyHostToDevice),
           emErrorInvalidValue);
  CHECK_EM(emMemcpy(d0, host.data(), 8, static_cast<emMemcpyKind>(3)),
           emErrorInvalidValue);

  CHECK_OK(emFree(d0));
  CHECK_OK(emFree(d1));
  // A freed buffer is no longer device memory.
  CHECK_EM(emMemcpy(d0, host.data(), 8, emMemcpyHostToDevice),
           emErrorInvalidValue);
}

void test_bad_free_and_oom() {
  int on_host = 0;
  CHECK_EM(emFree(&on_host), emErrorInvalidValue);
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, 256));
  CHECK_EM(emFree(static_cast<char*>(p) + 8), emErrorInvalidValue);
  CHECK_OK(emFree(p));
  CHECK_EM(emFree(p), emErrorInvalidValue); // double free

  const emMemStats before = stats_of(0);
  void* huge = &on_host;
  CHECK_EM(emMalloc(&huge, size_t{5} << 30), emErrorMemoryAllocation);
  CHECK(huge == nullptr);
  CHECK(stats_of(0).total_allocations == before.total_allocations);
}

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

// Resident shared memory of this process, from /proc/self/status (kB).
long rss_shmem_kb() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "RssShmem: %ld kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb;
}

// Freed device memory goes back to the OS, and its range is reused.
void test_free_returns_memory() {
  const size_t n = size_t{8} << 20;
  const long before = rss_shmem_kb();
  CHECK(before >= 0);
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, n));
  const std::vector<unsigned char> ones(n, 1);
  CHECK_OK(emMemcpy(p, ones.data(), n, emMemcpyHostToDevice));
  const long filled = rss_shmem_kb();
  CHECK(filled - before >= static_cast<long>(n >> 10) * 9 / 10);
  CHECK_OK(emFree(p));
  const long freed = rss_shmem_kb();
  CHECK(freed - before < 1024); // less than 1 MiB of the 8 MiB remain

  void* q = nullptr;
  CHECK_OK(emMalloc(&q, n));
  CHECK(q == p); // first fit: the same range
  // Its old pages are gone: the reused range reads as fresh (zero) pages.
  std::vector<unsigned char> back(n, 7);
  CHECK_OK(emMemcpy(back.data(), q, n, emMemcpyDeviceToHost));
  CHECK(std::count(back.begin(), back.end(), 0) == static_cast<long>(n));
  CHECK_OK(emFree(q));
}

// Fills device 1 to `capacity` and back. Only address space is used: the
// pages are never touched.
void test_capacity(size_t capacity) {
  CHECK_OK(emSetDevice(1));
  const emMemStats before = stats_of(1);
  void* all = nullptr;
  CHECK_OK(emMalloc(&all, capacity));
  void* more = &all;
  CHECK_EM(emMalloc(&more, 1), emErrorMemoryAllocation);
  CHECK(more == nullptr);
  CHECK(stats_of(1).total_allocations == before.total_allocations + 1);
  CHECK_OK(emFree(all));

  // Three pieces; freeing the first two (neighbours) must leave one range
  // of half the capacity, which only coalescing provides.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t quarter = capacity / 4 / page * page;
  void* piece[3] = {};
  CHECK_OK(emMalloc(&piece[0], quarter));
  CHECK_OK(emMalloc(&piece[1], quarter));
  CHECK_OK(emMalloc(&piece[2], capacity - 2 * quarter));
  CHECK_EM(emMalloc(&more, 1), emErrorMemoryAllocation);
  CHECK_OK(emFree(piece[1]));
  CHECK_OK(emFree(piece[0]));
  void* half = nullptr;
  CHECK_OK(emMalloc(&half, 2 * quarter));
  CHECK(half == piece[0]);
  CHECK_OK(emFree(half));
  CHECK_OK(emFree(piece[2]));
  CHECK_EM(emMalloc(&more, capacity + 1), emErrorMemoryAllocation);
  CHECK(stats_of(1).bytes_in_use == before.bytes_in_use);
  CHECK_OK(emSetDevice(0));
}

// fork() gives the child its own copy of device memory, as of the fork: what
// either process then writes or frees, the other does not see.
void test_fork() {
  const size_t n = 3 * 4096;
  std::vector<unsigned char> pattern(n);
  for (size_t i = 0; i < n; ++i) {
    pattern[i] = static_cast<unsigned char>(i % 251);
  }
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, n));
  CHECK_OK(emMemcpy(p, pattern.data(), n, emMemcpyHostToDevice));
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<unsigned char> seen(n);
    bool ok = emMemcpy(seen.data(), p, n, emMemcpyDeviceToHost) == emSuccess &&
        seen == pattern;
    const std::vector<unsigned char> zeros(n, 0);
    ok = ok &&
        emMemcpy(p, zeros.data(), n, emMemcpyHostToDevice) == emSuccess &&
        emFree(p) == emSuccess;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<unsigned char> back(n);
  CHECK_OK(emMemcpy(back.data(), p, n, emMemcpyDeviceToHost));
  CHECK(back == pattern);
  CHECK_OK(emFree(p));
}

// Two threads, one per device, allocating, copying, launching and freeing at
// the same time: exercises the registry lock and the per-thread device.
void test_threads() {
  auto worker = [](int device, bool* ok) {
    *ok = emSetDevice(device) == emSuccess;
    for (int i = 0; i < 200 && *ok; ++i) {
      const size_t n = 1 + static_cast<size_t>(i) * 97;
      std::vector<unsigned char> host(n, static_cast<unsigned char>(i));
      std::vector<unsigned char> back(n, 0);
      void* p = nullptr;
      int owner = -1;
      *ok = emMalloc(&p, n) == emSuccess &&
          emPointerGetDevice(p, &owner) == emSuccess && owner == device &&
          emMemcpy(p, host.data(), n, emMemcpyHostToDevice) == emSuccess &&
          emLaunchKernel([](void*) {}, nullptr, &p, 1) == emSuccess &&
          emMemcpy(back.data(), p, n, emMemcpyDeviceToHost) == emSuccess &&
          back == host && emFree(p) == emSuccess;
    }
  };
  bool ok0 = false;
  bool ok1 = false;
  std::thread t0(worker, 0, &ok0);
  std::thread t1(worker, 1, &ok1);
  t0.join();
  t1.join();
  CHECK(ok0 && ok1);
}

void test_error_strings() {
  for (emError_t e : {emSuccess, emErrorInvalidDevice, emErrorInvalidValue,
                      emErrorMemoryAllocation}) {
    CHECK(std::strcmp(emGetErrorString(e), "unknown ember error") != 0);
  }
  // The "unknown ember error" fallback is for C callers: in C++ no value
  // outside 0..3 can be formed in an emError_t without undefined behavior.
}

struct Recorded {
  emEvent event;
  std::thread::id thread;
  size_t live_in_callback; // device 0 live allocations, read from the callback
};

void record_event(const emEvent* event, void* user) {
  emMemStats s{};
  // Calling back into the driver from the callback must not deadlock.
  emMemGetStats(0, &s);
  static_cast<std::vector<Recorded>*>(user)->push_back(
      {*event, std::this_thread::get_id(), s.live_allocations});
}

void test_event_callback() {
  std::vector<Recorded> seen;
  CHECK_OK(emSetEventCallback(record_event, &seen));

  const size_t live_before = stats_of(0).live_allocations;
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(emMalloc(&a, 16));
  CHECK(seen.size() == 1);
  CHECK(seen[0].event.kind == emEventMalloc && seen[0].event.device == 0);
  CHECK(seen[0].event.bytes == 16 && seen[0].event.ptr == a);
  CHECK(seen[0].thread == std::this_thread::get_id());
  CHECK(seen[0].live_in_callback == live_before + 1); // reported after the work

  CHECK_OK(emSetDevice(1));
  CHECK_OK(emMalloc(&b, 8));
  CHECK_OK(emSetDevice(0));
  CHECK(seen.size() == 2 && seen[1].event.device == 1);

  char host[16] = "ember";
  CHECK_OK(emMemcpy(a, host, 16, emMemcpyHostToDevice));
  CHECK_OK(emMemcpy(b, a, 8, emMemcpyDeviceToDevice));
  CHECK_OK(emMemcpy(host, b, 4, emMemcpyDeviceToHost));
  CHECK(seen.size() == 5);
  CHECK(seen[2].event.kind == emEventMemcpy);
  CHECK(seen[2].event.memcpy_kind == emMemcpyHostToDevice);
  CHECK(seen[2].event.device == 0 && seen[2].event.peer_device == -1);
  CHECK(seen[2].event.bytes == 16);
  CHECK(seen[3].event.memcpy_kind == emMemcpyDeviceToDevice);
  CHECK(seen[3].event.device == 1 && seen[3].event.peer_device == 0);
  CHECK(seen[3].event.bytes == 8);
  CHECK(seen[4].event.memcpy_kind == emMemcpyDeviceToHost);
  CHECK(seen[4].event.device == 1 && seen[4].event.bytes == 4);

  void* const buffers[] = {a};
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK(seen.size() == 6 && seen[5].event.kind == emEventKernelLaunch);
  CHECK(seen[5].event.device == 0 && seen[5].event.num_buffers == 1);

  // Failures and no-ops report nothing.
  void* none = nullptr;
  CHECK_OK(emMalloc(&none, 0));
  CHECK_OK(emFree(nullptr));
  CHECK_OK(emMemcpy(a, host, 0, emMemcpyHostToDevice));
  CHECK_EM(emFree(host), emErrorInvalidValue);
  CHECK_EM(emMemcpy(a, host, 17, emMemcpyHostToDevice), emErrorInvalidValue);
  CHECK_EM(emMalloc(&none, size_t{5} << 30), emErrorMemoryAllocation);
  CHECK(seen.size() == 6);

  CHECK_OK(emFree(a));
  CHECK(seen.size() == 7 && seen[6].event.kind == emEventFree);
  CHECK(seen[6].event.bytes == 16 && seen[6].event.ptr == a);
  CHECK(seen[6].event.device == 0);

  // Events arrive on the thread that called the driver.
  std::thread::id worker_id;
  std::thread worker([&] {
    worker_id = std::this_thread::get_id();
    emFree(b);
  });
  worker.join();
  CHECK(seen.size() == 8 && seen[7].thread == worker_id);
  CHECK(seen[7].event.kind == emEventFree && seen[7].event.device == 1);

  // Removing the callback stops the events.
  CHECK_OK(emSetEventCallback(nullptr, nullptr));
  CHECK_OK(emMalloc(&a, 4));
  CHECK_OK(emFree(a));
  CHECK(seen.size() == 8);
}


// ---------------------------------------------------------------------------
// Streams and sync events.

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// 1: idle, 0: busy, -1: the query failed.
int stream_idle(int device, emStream_t stream) {
  int idle = -1;
  return emStreamQuery(device, stream, &idle) == emSuccess ? idle : -1;
}

// 1: the latest record completed, 0: pending, -1: the query failed.
int event_done(emSyncEvent_t event) {
  int done = -1;
  return emSyncEventQuery(event, &done) == emSuccess ? done : -1;
}

bool detail_has(emError_t error, const char* text) {
  return std::strstr(emGetErrorDetail(error), text) != nullptr;
}

void test_stream_api_and_errors() {
  emStream_t a = -1;
  emStream_t b = -1;
  emStream_t on_1 = -1;
  CHECK_OK(emStreamCreate(0, &a));
  CHECK_OK(emStreamCreate(0, &b));
  CHECK_OK(emStreamCreate(1, &on_1));
  CHECK(a > 0 && b > 0 && on_1 > 0 && a != b && b != on_1 && a != on_1);
  CHECK_EM(emStreamCreate(0, nullptr), emErrorInvalidValue);

  // Errors name what is wrong.
  emStream_t s = -1;
  CHECK_EM(emStreamCreate(2, &s), emErrorInvalidDevice);
  CHECK(detail_has(emErrorInvalidDevice, "device index 2 is out of range"));
  int idle = -1;
  CHECK_EM(emStreamQuery(-1, 0, &idle), emErrorInvalidDevice);
  CHECK_EM(emStreamQuery(0, 0, nullptr), emErrorInvalidValue);
  CHECK_EM(emStreamSynchronize(0, 987654), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "stream 987654 does not exist"));
  CHECK_EM(emSleepAsync(1, 0, on_1), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "belongs to ember device 1, not "
                                        "device 0"));
  CHECK(std::strcmp(emGetErrorDetail(emErrorInvalidDevice), "") == 0);
  // A later failure without a detail does not show a stale one.
  CHECK_EM(emFree(&s), emErrorInvalidValue);
  CHECK(std::strcmp(emGetErrorDetail(emErrorInvalidValue), "") == 0);

  // The current stream: per thread and device, 0 at first.
  CHECK_OK(emGetStream(0, &s));
  CHECK(s == 0);
  CHECK_OK(emSetStream(0, a));
  CHECK_OK(emSetStream(1, on_1));
  CHECK_OK(emGetStream(0, &s));
  CHECK(s == a);
  CHECK_OK(emGetStream(1, &s));
  CHECK(s == on_1);
  CHECK_EM(emSetStream(0, on_1), emErrorInvalidValue); // another device's
  CHECK_EM(emSetStream(3, 0), emErrorInvalidDevice);
  CHECK_EM(emGetStream(2, &s), emErrorInvalidDevice);
  CHECK_OK(emGetStream(0, &s));
  CHECK(s == a); // a failed set changes nothing
  int device = -1;
  CHECK_OK(emGetDevice(&device));
  CHECK(device == 0); // setting a stream does not set the device
  emStream_t other = -1;
  std::thread([&] { emGetStream(0, &other); }).join();
  CHECK(other == 0);
  CHECK_OK(emSetStream(0, 0));
  CHECK_OK(emSetStream(1, 0));

  // Idle streams: query says so, synchronize returns at once.
  CHECK(stream_idle(0, a) == 1);
  CHECK_OK(emStreamSynchronize(0, 0));
  CHECK_OK(emDeviceSynchronize(1));
}

// Asynchronous work returns before it is done; synchronize waits for it.
void test_async_returns_before_completion() {
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  const double start = now_ms();
  CHECK_OK(emSleepAsync(200000, 0, s));
  const double queued = now_ms();
  CHECK(queued - start < 100);
  CHECK(stream_idle(0, s) == 0);
  CHECK(stream_idle(0, 0) == 1); // other streams are not busy
  CHECK_OK(emStreamSynchronize(0, s));
  CHECK(now_ms() - start >= 199);
  CHECK(stream_idle(0, s) == 1);

  // An async D2H copy has not landed when it returns.
  const size_t n = 4096;
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, n));
  const std::vector<unsigned char> ones(n, 1);
  CHECK_OK(emMemcpy(d, ones.data(), n, emMemcpyHostToDevice));
  std::vector<unsigned char> host(n, 0);
  CHECK_OK(emSleepAsync(100000, 0, s));
  CHECK_OK(emMemcpyAsync(host.data(), d, n, emMemcpyDeviceToHost, 0, s));
  CHECK(host[0] == 0 && host[n - 1] == 0);
  CHECK_OK(emDeviceSynchronize(0));
  CHECK(host[0] == 1 && host[n - 1] == 1);
  // Arguments emMemcpy rejects are rejected, and nothing is queued.
  CHECK_EM(emMemcpyAsync(host.data(), d, n + 1, emMemcpyDeviceToHost, 0, s),
           emErrorInvalidValue);
  CHECK_EM(emMemcpyAsync(d, host.data(), n, emMemcpyDeviceToHost, 0, s),
           emErrorInvalidValue);
  CHECK_EM(emMemcpyAsync(d, host.data(), n, emMemcpyHostToDevice, 5, s),
           emErrorInvalidDevice);
  CHECK_OK(emMemcpyAsync(d, host.data(), 0, emMemcpyHostToDevice, 0, s));
  CHECK(stream_idle(0, s) == 1);
  CHECK_OK(emFree(d));
}

// A kernel that copies n bytes from `from` to `to` (device addresses).
struct CopyKernelArgs {
  const unsigned char* from;
  unsigned char* to;
  size_t n;
};

void copy_kernel(void* raw) {
  auto* args = static_cast<CopyKernelArgs*>(raw);
  ptrdiff_t offset = 0;
  if (emGetKernelOffset(&offset) != emSuccess) return;
  std::memcpy(args->to + offset, args->from + offset, args->n);
}

// Work on one stream runs in the order it was queued, and kernels and
// synchronous copies take their place in the current stream's order.
void test_stream_ordering() {
  const size_t n = 2 * 4096 + 5;
  std::vector<unsigned char> first(n), second(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) {
    first[i] = static_cast<unsigned char>(i * 3);
    second[i] = static_cast<unsigned char>(i * 5 + 1);
  }
  void* d = nullptr;
  void* e = nullptr;
  CHECK_OK(emMalloc(&d, n));
  CHECK_OK(emMalloc(&e, n));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));

  // H2D, then D2D, then D2H, each after the one before.
  CHECK_OK(emSleepAsync(50000, 0, s));
  CHECK_OK(emMemcpyAsync(d, first.data(), n, emMemcpyHostToDevice, 0, s));
  CHECK_OK(emMemcpyAsync(e, d, n, emMemcpyDeviceToDevice, 0, s));
  CHECK_OK(emMemcpyAsync(d, second.data(), n, emMemcpyHostToDevice, 0, s));
  CHECK_OK(emMemcpyAsync(back.data(), e, n, emMemcpyDeviceToHost, 0, s));
  CHECK_OK(emStreamSynchronize(0, s));
  CHECK(back == first);

  // A launch on the current stream waits for the work queued before it.
  CHECK_OK(emSetStream(0, s));
  double start = now_ms();
  CHECK_OK(emSleepAsync(100000, 0, s));
  CHECK_OK(emMemcpyAsync(d, first.data(), n, emMemcpyHostToDevice, 0, s));
  CopyKernelArgs args{static_cast<unsigned char*>(d),
                      static_cast<unsigned char*>(e), n};
  void* const buffers[] = {d, e};
  CHECK_OK(emLaunchKernel(copy_kernel, &args, buffers, 2));
  CHECK(now_ms() - start >= 99);
  CHECK(stream_idle(0, s) == 1);
  CHECK_OK(emSetStream(0, 0));
  std::fill(back.begin(), back.end(), 0);
  CHECK_OK(emMemcpy(back.data(), e, n, emMemcpyDeviceToHost));
  CHECK(back == first);

  // So does a synchronous copy on the current stream of its device.
  CHECK_OK(emSetStream(0, s));
  CHECK_OK(emSleepAsync(50000, 0, s));
  CHECK_OK(emMemcpyAsync(d, second.data(), n, emMemcpyHostToDevice, 0, s));
  CHECK_OK(emMemcpy(back.data(), d, n, emMemcpyDeviceToHost));
  CHECK(back == second);
  CHECK_OK(emSetStream(0, 0));

  CHECK_OK(emFree(d));
  CHECK_OK(emFree(e));
}

// While a kernel runs, work another thread queues on its stream waits.
struct HeldKernelArgs {
  unsigned char* d;
  std::atomic<int> phase{0}; // 1: kernel started, 2: other thread queued
  unsigned char seen = 0;
};

void held_kernel(void* raw) {
  auto* args = static_cast<HeldKernelArgs*>(raw);
  ptrdiff_t offset = 0;
  emGetKernelOffset(&offset);
  args->phase = 1;
  while (args->phase.load() != 2) std::this_thread::yield();
  // Time enough for a worker that (wrongly) ran the copy to finish it.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  args->seen = args->d[offset];
}

void test_kernel_holds_its_stream() {
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, 64));
  const unsigned char seven = 7;
  HeldKernelArgs args;
  args.d = static_cast<unsigned char*>(d);
  std::thread other([&] {
    while (args.phase.load() != 1) std::this_thread::yield();
    emMemcpyAsync(d, &seven, 1, emMemcpyHostToDevice, 0, s);
    args.phase = 2;
  });
  CHECK_OK(emSetStream(0, s));
  void* const buffers[] = {d};
  CHECK_OK(emLaunchKernel(held_kernel, &args, buffers, 1));
  CHECK_OK(emSetStream(0, 0));
  other.join();
  CHECK(args.seen == 0); // the queued copy had not run
  CHECK_OK(emStreamSynchronize(0, s));
  unsigned char back = 0;
  CHECK_OK(emMemcpy(&back, d, 1, emMemcpyDeviceToHost));
  CHECK(back == 7);
  CHECK_OK(emFree(d));
}

// Streams run concurrently: reading on one stream what another writes, with
// no wait, sees the old data; waiting for an event fixes it.
void test_cross_stream_wait() {
  const size_t n = 4096;
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, n)); // zeros
  emStream_t writer = 0;
  emStream_t reader = 0;
  CHECK_OK(emStreamCreate(0, &writer));
  CHECK_OK(emStreamCreate(0, &reader));
  const std::vector<unsigned char> nines(n, 9);
  std::vector<unsigned char> back(n, 1);

  // The race: the reader does not wait for the writer's sleep.
  CHECK_OK(emSleepAsync(300000, 0, writer));
  CHECK_OK(emMemcpyAsync(d, nines.data(), n, emMemcpyHostToDevice, 0, writer));
  CHECK_OK(emMemcpyAsync(back.data(), d, n, emMemcpyDeviceToHost, 0, reader));
  CHECK_OK(emStreamSynchronize(0, reader));
  CHECK(back[0] == 0); // old data
  CHECK(stream_idle(0, writer) == 0);
  CHECK_OK(emStreamSynchronize(0, writer));

  // The fix: the reader waits for an event recorded after the write.
  const std::vector<unsigned char> fives(n, 5);
  emSyncEvent_t written = 0;
  CHECK_OK(emSyncEventCreate(0, &written, emSyncEventDisableTiming));
  CHECK_OK(emSleepAsync(200000, 0, writer));
  CHECK_OK(emMemcpyAsync(d, fives.data(), n, emMemcpyHostToDevice, 0, writer));
  CHECK_OK(emSyncEventRecord(written, 0, writer));
  const double start = now_ms();
  CHECK_OK(emStreamWaitSyncEvent(0, reader, written));
  CHECK(now_ms() - start < 100); // the wait is queued, not done by the host
  CHECK_OK(emMemcpyAsync(back.data(), d, n, emMemcpyDeviceToHost, 0, reader));
  CHECK(event_done(written) == 0);
  CHECK_OK(emStreamSynchronize(0, reader));
  CHECK(back[0] == 5 && back[n - 1] == 5);
  CHECK(event_done(written) == 1);

  // A stream of device 1 may wait for an event of device 0.
  emSyncEvent_t e0 = 0;
  CHECK_OK(emSyncEventCreate(0, &e0, emSyncEventDefault));
  CHECK_OK(emSleepAsync(100000, 0, writer));
  CHECK_OK(emSyncEventRecord(e0, 0, writer));
  CHECK_OK(emStreamWaitSyncEvent(1, 0, e0));
  CHECK(stream_idle(1, 0) == 0);
  CHECK_OK(emDeviceSynchronize(1));
  CHECK(event_done(e0) == 1);

  CHECK_OK(emSyncEventDestroy(written));
  CHECK_OK(emSyncEventDestroy(e0));
  CHECK_OK(emFree(d));
}

void test_sync_events() {
  emSyncEvent_t start = 0;
  emSyncEvent_t end = 0;
  CHECK_OK(emSyncEventCreate(0, &start, emSyncEventDefault));
  CHECK_OK(emSyncEventCreate(0, &end, emSyncEventDefault));
  CHECK(start > 0 && end > 0 && start != end);
  CHECK_EM(emSyncEventCreate(2, &start, 0), emErrorInvalidDevice);
  CHECK_EM(emSyncEventCreate(0, &start, 8), emErrorInvalidValue);
  CHECK_EM(emSyncEventCreate(0, nullptr, 0), emErrorInvalidValue);

  // Never recorded: clear errors, no hang.
  int done = -1;
  CHECK_EM(emSyncEventQuery(start, &done), emErrorInvalidValue);
  CHECK(done == -1);
  CHECK(detail_has(emErrorInvalidValue, "has never been recorded"));
  CHECK_EM(emSyncEventSynchronize(start), emErrorInvalidValue);
  CHECK_EM(emStreamWaitSyncEvent(0, 0, start), emErrorInvalidValue);
  float ms = -1;
  CHECK_EM(emSyncEventElapsedTime(&ms, start, end), emErrorInvalidValue);
  CHECK(ms == -1);

  // Timing a sleep: the timestamps are taken when the stream gets there.
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  CHECK_OK(emSyncEventRecord(start, 0, s)); // idle stream: done at once
  CHECK(event_done(start) == 1);
  CHECK_OK(emSleepAsync(30000, 0, s));
  CHECK_OK(emSyncEventRecord(end, 0, s));
  CHECK(event_done(end) == 0);
  CHECK_EM(emSyncEventElapsedTime(&ms, start, end), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "has not completed its latest record"));
  CHECK_OK(emSyncEventSynchronize(end));
  CHECK(event_done(end) == 1);
  CHECK_OK(emSyncEventElapsedTime(&ms, start, end));
  CHECK(ms >= 29.0f && ms < 10000.0f);
  float back = 0;
  CHECK_OK(emSyncEventElapsedTime(&back, end, start));
  CHECK(back == -ms);

  // Recording again re-arms the event.
  CHECK_OK(emSleepAsync(50000, 0, s));
  CHECK_OK(emSyncEventRecord(end, 0, s));
  CHECK(event_done(end) == 0);
  CHECK_OK(emSyncEventSynchronize(end));
  float longer = 0;
  CHECK_OK(emSyncEventElapsedTime(&longer, start, end));
  CHECK(longer >= ms + 49.0f);

  // Wrong device, no timing, unknown or destroyed events.
  emStream_t on_1 = 0;
  CHECK_OK(emStreamCreate(1, &on_1));
  CHECK_EM(emSyncEventRecord(start, 1, on_1), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "belongs to ember device 0"));
  CHECK_EM(emSyncEventRecord(start, 0, on_1), emErrorInvalidValue);
  CHECK_EM(emSyncEventRecord(start, 9, 0), emErrorInvalidDevice);
  emSyncEvent_t untimed = 0;
  emSyncEvent_t other_device = 0;
  CHECK_OK(emSyncEventCreate(0, &untimed, emSyncEventDisableTiming));
  CHECK_OK(emSyncEventCreate(1, &other_device, emSyncEventDefault));
  CHECK_OK(emSyncEventRecord(untimed, 0, 0));
  CHECK_OK(emSyncEventRecord(other_device, 1, on_1));
  CHECK_EM(emSyncEventElapsedTime(&ms, start, untimed), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "emSyncEventDisableTiming"));
  CHECK_EM(emSyncEventElapsedTime(&ms, start, other_device),
           emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "different ember devices"));
  CHECK_EM(emSyncEventElapsedTime(nullptr, start, end), emErrorInvalidValue);
  CHECK_EM(emSyncEventQuery(0, &done), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "event 0 does not exist"));

  // Destroying an event with a record still queued is fine.
  CHECK_OK(emSleepAsync(20000, 0, s));
  CHECK_OK(emSyncEventRecord(untimed, 0, s));
  CHECK_OK(emSyncEventDestroy(untimed));
  CHECK_EM(emSyncEventQuery(untimed, &done), emErrorInvalidValue);
  CHECK_EM(emSyncEventDestroy(untimed), emErrorInvalidValue);
  CHECK_OK(emStreamSynchronize(0, s));
  for (emSyncEvent_t e : {start, end, other_device}) {
    CHECK_OK(emSyncEventDestroy(e));
  }
}

// Device synchronize waits for every stream of the device, and only those.
void test_device_synchronize() {
  emStream_t a = 0;
  emStream_t b = 0;
  emStream_t c = 0;
  CHECK_OK(emStreamCreate(0, &a));
  CHECK_OK(emStreamCreate(0, &b));
  CHECK_OK(emStreamCreate(1, &c));
  const double start = now_ms();
  CHECK_OK(emSleepAsync(200000, 0, a));
  CHECK_OK(emSleepAsync(200000, 0, b)); // concurrently with a
  CHECK_OK(emSleepAsync(150000, 0, 0));
  CHECK_OK(emSleepAsync(1000000, 1, c));
  CHECK_OK(emDeviceSynchronize(0));
  const double took = now_ms() - start;
  CHECK(took >= 199 && took < 900);
  CHECK(stream_idle(0, a) == 1);
  CHECK(stream_idle(0, b) == 1);
  CHECK(stream_idle(0, 0) == 1);
  CHECK(stream_idle(1, c) == 0);
  CHECK_OK(emDeviceSynchronize(1));
  CHECK(stream_idle(1, c) == 1);
}

// Memory freed while queued work uses it is not reused before that work ran.
void test_free_with_queued_work() {
  const size_t n = 2 * 4096;
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, n));
  const std::vector<unsigned char> threes(n, 3);
  CHECK_OK(emMemcpy(d, threes.data(), n, emMemcpyHostToDevice));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  std::vector<unsigned char> back(n, 0);
  CHECK_OK(emSleepAsync(100000, 0, s));
  CHECK_OK(emMemcpyAsync(back.data(), d, n, emMemcpyDeviceToHost, 0, s));
  CHECK_OK(emFree(d));
  void* q = nullptr;
  CHECK_OK(emMalloc(&q, n));
  CHECK(q != d); // d's range is still in use
  const std::vector<unsigned char> zeros(n, 0);
  CHECK_OK(emMemcpy(q, zeros.data(), n, emMemcpyHostToDevice));
  CHECK_OK(emStreamSynchronize(0, s));
  CHECK(back == threes);
  void* again = nullptr;
  CHECK_OK(emMalloc(&again, n));
  CHECK(again == d); // returned once the copy ran
  CHECK_OK(emFree(again));
  CHECK_OK(emFree(q));
}

// Waiting for a busy stream inside a kernel is refused (it could never end).
emError_t sync_in_kernel = emSuccess;
emError_t idle_sync_in_kernel = emSuccess;
emStream_t busy_stream = 0;

void syncing_kernel(void*) {
  idle_sync_in_kernel = emStreamSynchronize(0, 0);
  emSleepAsync(50000, 0, busy_stream);
  sync_in_kernel = emStreamSynchronize(0, busy_stream);
}

void test_wait_inside_kernel() {
  CHECK_OK(emStreamCreate(0, &busy_stream));
  CHECK_OK(emSetStream(0, busy_stream));
  CHECK_OK(emLaunchKernel(syncing_kernel, nullptr, nullptr, 0));
  CHECK_OK(emSetStream(0, 0));
  CHECK(idle_sync_in_kernel == emSuccess);
  CHECK(sync_in_kernel == emErrorInvalidValue);
  CHECK_OK(emStreamSynchronize(0, busy_stream)); // the sleep ran after
}

// fork() waits for queued work, so the child sees its result; the child gets
// workers of its own when it uses streams.
void test_fork_with_streams() {
  const size_t n = 4096;
  void* p = nullptr;
  CHECK_OK(emMalloc(&p, n));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  const std::vector<unsigned char> eights(n, 8);
  CHECK_OK(emSleepAsync(50000, 0, s));
  CHECK_OK(emMemcpyAsync(p, eights.data(), n, emMemcpyHostToDevice, 0, s));
  const pid_t pid = fork();
  if (pid == 0) {
    std::vector<unsigned char> seen(n, 0);
    bool ok = stream_idle(0, s) == 1 &&
        emMemcpy(seen.data(), p, n, emMemcpyDeviceToHost) == emSuccess &&
        seen == eights;
    const std::vector<unsigned char> ones(n, 1);
    ok = ok && emSleepAsync(10000, 0, s) == emSuccess &&
        emMemcpyAsync(p, ones.data(), n, emMemcpyHostToDevice, 0, s) ==
            emSuccess &&
        emStreamSynchronize(0, s) == emSuccess &&
        emMemcpy(seen.data(), p, n, emMemcpyDeviceToHost) == emSuccess &&
        seen == ones;
    // The child's worker is idle now: new work must wake it (the parent's
    // workers, gone in the child, must not swallow the wake-up).
    for (int round = 0; ok && round < 20; ++round) {
      ok = emMemcpyAsync(p, eights.data(), n, emMemcpyHostToDevice, 0, s) ==
              emSuccess &&
          emStreamSynchronize(0, s) == emSuccess;
    }
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<unsigned char> back(n);
  CHECK_OK(emMemcpy(back.data(), p, n, emMemcpyDeviceToHost));
  CHECK(back == eights); // the child's writes stay in the child
  CHECK_OK(emFree(p));
}

void test_stream_trace_events() {
  std::vector<Recorded> seen;
  CHECK_OK(emSetEventCallback(record_event, &seen));
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  void* d = nullptr;
  CHECK_OK(emMalloc(&d, 64));
  char host[64] = {};
  emSyncEvent_t e = 0;
  CHECK_OK(emSyncEventCreate(0, &e, emSyncEventDefault));

  // Async copies are memcpy events, reported at enqueue; the stream kinds are
  // off until enabled.
  seen.clear();
  CHECK_OK(emSleepAsync(100000, 0, s));
  CHECK_OK(emMemcpyAsync(d, host, 64, emMemcpyHostToDevice, 0, s));
  CHECK_OK(emSyncEventRecord(e, 0, s));
  CHECK(seen.size() == 1);
  CHECK(seen[0].event.kind == emEventMemcpy && seen[0].event.async == 1);
  CHECK(seen[0].event.stream == s && seen[0].event.bytes == 64);
  CHECK(seen[0].thread == std::this_thread::get_id());
  CHECK(stream_idle(0, s) == 0); // reported before it ran

  for (emEventKind k : {emEventSleep, emEventSyncEventRecord,
                        emEventStreamWaitSyncEvent}) {
    CHECK_OK(emSetEventKindEnabled(k, 1));
  }
  CHECK_EM(emSetEventKindEnabled(static_cast<emEventKind>(7), 1),
           emErrorInvalidValue);
  seen.clear();
  CHECK_OK(emSleepAsync(1000, 0, s));
  CHECK_OK(emSyncEventRecord(e, 0, s));
  CHECK_OK(emStreamWaitSyncEvent(1, 0, e));
  CHECK(seen.size() == 3);
  CHECK(seen[0].event.kind == emEventSleep && seen[0].event.async == 1);
  CHECK(seen[0].event.microseconds == 1000 && seen[0].event.stream == s);
  CHECK(seen[1].event.kind == emEventSyncEventRecord);
  CHECK(seen[1].event.sync_event == e && seen[1].event.device == 0);
  CHECK(seen[2].event.kind == emEventStreamWaitSyncEvent);
  CHECK(seen[2].event.device == 1 && seen[2].event.peer_device == 0);
  CHECK(seen[2].event.sync_event == e && seen[2].event.stream == 0);

  // A launch and a synchronous copy report the stream they ran on.
  seen.clear();
  CHECK_OK(emSetStream(0, s));
  void* const buffers[] = {d};
  CHECK_OK(emLaunchKernel([](void*) {}, nullptr, buffers, 1));
  CHECK_OK(emMemcpy(host, d, 8, emMemcpyDeviceToHost));
  CHECK_OK(emSetStream(0, 0));
  CHECK(seen.size() == 2);
  CHECK(seen[0].event.kind == emEventKernelLaunch && seen[0].event.stream == s);
  CHECK(seen[1].event.kind == emEventMemcpy && seen[1].event.async == 0);
  CHECK(seen[1].event.stream == s);

  // Turned off again, kinds are not reported; that includes the old ones.
  for (emEventKind k : {emEventSleep, emEventSyncEventRecord,
                        emEventStreamWaitSyncEvent, emEventMalloc}) {
    CHECK_OK(emSetEventKindEnabled(k, 0));
  }
  seen.clear();
  void* x = nullptr;
  CHECK_OK(emMalloc(&x, 8));
  CHECK_OK(emSleepAsync(1, 0, s));
  CHECK(seen.empty());
  CHECK_OK(emSetEventKindEnabled(emEventMalloc, 1));
  CHECK_OK(emFree(x));
  CHECK(seen.size() == 1 && seen[0].event.kind == emEventFree);
  CHECK_OK(emSetEventCallback(nullptr, nullptr));
  CHECK_OK(emDeviceSynchronize(0));
  CHECK_OK(emDeviceSynchronize(1));
  CHECK_OK(emSyncEventDestroy(e));
  CHECK_OK(emFree(d));
}

} // namespace

// argv[1]: the per-device capacity the driver should have (bytes); default
// 4 GiB. tests/test_driver_selftest.py runs this program with and without
// EMBER_DEVICE_MEMORY_BYTES.
int main(int argc, char** argv) {
  const size_t capacity =
      argc > 1 ? std::strtoull(argv[1], nullptr, 10) : size_t{4} << 30;
  test_devices();
  test_malloc_free_stats();
  test_copies();
  test_bad_free_and_oom();
  test_kernel_launch();
  test_free_while_kernel_runs();
  test_free_returns_memory();
  test_capacity(capacity);
  test_fork();
  test_threads();
  test_error_strings();
  test_event_callback();
  test_stream_api_and_errors();
  test_async_returns_before_completion();
  test_stream_ordering();
  test_kernel_holds_its_stream();
  test_cross_stream_wait();
  test_sync_events();
  test_device_synchronize();
  test_free_with_queued_work();
  test_wait_inside_kernel();
  test_fork_with_streams();
  test_stream_trace_events();
  for (int d = 0; d < 2; ++d) {
    CHECK(stats_of(d).live_allocations == 0); // nothing leaked
  }
  if (failures != 0) {
    std::fprintf(stderr, "ember driver selftest: %d check(s) FAILED\n",
                 failures);
    return 1;
  }
  std::printf("ember driver selftest: all checks passed\n");
  return 0;
}
