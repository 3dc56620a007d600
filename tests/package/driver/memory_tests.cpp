// Device memory: allocation and its statistics, copies in every direction,
// bad frees and out-of-memory, memory going back to the OS, the capacity
// (EMBER_DEVICE_MEMORY_BYTES), and fork() giving the child its own copy.

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

namespace {

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

} // namespace

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
