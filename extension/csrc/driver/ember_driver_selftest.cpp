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
