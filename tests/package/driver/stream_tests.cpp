// Streams: the API and its errors, asynchronous work, in-order execution,
// kernels holding their stream, device synchronize, frees with queued work,
// waits refused inside a kernel, and fork() with work queued.

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

namespace {

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

} // namespace

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

namespace {

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

} // namespace

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

namespace {

// Waiting for a busy stream inside a kernel is refused (it could never end).
emError_t sync_in_kernel = emSuccess;
emError_t idle_sync_in_kernel = emSuccess;
emStream_t busy_stream = 0;

void syncing_kernel(void*) {
  idle_sync_in_kernel = emStreamSynchronize(0, 0);
  emSleepAsync(50000, 0, busy_stream);
  sync_in_kernel = emStreamSynchronize(0, busy_stream);
}

} // namespace

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
