// Smoke test for the ember driver's C API. No PyTorch involved:
//   g++ -std=c++17 -O1 -fPIC ember_driver.cpp ember_driver_selftest.cpp
//       -o /tmp/t && /tmp/t
// Exits non-zero if any check fails.

#include "ember_driver.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
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
  unsigned char* a;
  unsigned char* b; // a device buffer the kernel is not handed
  size_t n;
  int a_read_signal;
  int b_read_signal;
};

void fill_kernel(void* raw) {
  auto* args = static_cast<KernelArgs*>(raw);
  for (size_t i = 0; i < args->n; ++i) {
    args->a[i] = static_cast<unsigned char>(i);
  }
  // An emMemcpy issued by the kernel nests: `a` is still writable after it.
  const unsigned char tag = 0xAB;
  emMemcpy(args->a, &tag, 1, emMemcpyHostToDevice);
  args->a[1] = 0xCD;
  // The kernel's buffers are open to the host; buffers not handed to the
  // launch stay closed while it runs.
  args->a_read_signal = host_read_signal(args->a);
  args->b_read_signal = host_read_signal(args->b);
}

bool ran = false;
void mark_ran(void*) {
  ran = true;
}

void test_kernel_launch() {
  const size_t n = 3 * 4096;
  void* a = nullptr;
  void* b = nullptr;
  CHECK_OK(emMalloc(&a, n));
  CHECK_OK(emMalloc(&b, 16));
  CHECK(host_read_signal(a) == SIGSEGV); // idle device memory is sealed

  KernelArgs args{static_cast<unsigned char*>(a),
                  static_cast<unsigned char*>(b), n, -1, -1};
  // The same allocation twice (once through an interior pointer) plus a
  // nullptr, which is skipped.
  void* const buffers[] = {a, static_cast<char*>(a) + 100, nullptr};
  CHECK_OK(emLaunchKernel(fill_kernel, &args, buffers, 3));
  CHECK(args.a_read_signal == 0);
  CHECK(args.b_read_signal == SIGSEGV);
  CHECK(host_read_signal(a) == SIGSEGV); // sealed again after the kernel

  std::vector<unsigned char> back(n);
  CHECK_OK(emMemcpy(back.data(), a, n, emMemcpyDeviceToHost));
  CHECK(back[0] == 0xAB && back[1] == 0xCD && back[2] == 2);
  CHECK(back[n - 1] == static_cast<unsigned char>(n - 1));
  CHECK(host_read_signal(a) == SIGSEGV); // and after the copy

  // Bad launches: fn is not run.
  int on_host = 0;
  void* const bad[] = {a, &on_host};
  CHECK_EM(emLaunchKernel(mark_ran, nullptr, bad, 2), emErrorInvalidValue);
  CHECK(!ran);
  CHECK_EM(emLaunchKernel(nullptr, nullptr, buffers, 1), emErrorInvalidValue);
  CHECK_OK(emLaunchKernel(mark_ran, nullptr, nullptr, 0));
  CHECK(ran);

  CHECK_OK(emFree(a));
  CHECK_OK(emFree(b));
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

int main() {
  test_devices();
  test_malloc_free_stats();
  test_copies();
  test_bad_free_and_oom();
  test_kernel_launch();
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
