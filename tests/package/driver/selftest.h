// What the driver self-test's files share: the CHECK macros, small helpers,
// and one declaration per test (main.cpp runs them in order). The self-test is
// a plain C++ program against ember_driver.h alone, like the driver it checks:
// no PyTorch, no test framework, so it builds with one compiler call
// (test_driver_selftest.py) and a failure names the file and line.
#pragma once

#include "ember_driver.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>

// Failed checks so far (main.cpp reports them and exits non-zero).
inline int failures = 0;

// Not fatal: one run reports every failed check.
#define CHECK(cond)                                                      \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "FAIL %s line %d: %s\n",                      \
                   std::strrchr("/" __FILE__, '/') + 1, __LINE__, #cond); \
      ++failures;                                                        \
    }                                                                    \
  } while (0)

#define CHECK_EM(expr, expected) CHECK((expr) == (expected))
#define CHECK_OK(expr) CHECK_EM(expr, emSuccess)

inline emMemStats stats_of(int device) {
  emMemStats s{};
  emMemGetStats(device, &s);
  return s;
}

// Reads one byte at p in a forked child, so a fault cannot take the test
// down. Returns the signal that killed the child, or 0 if the read worked.
inline int host_read_signal(const void* p) {
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

inline double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// 1: idle, 0: busy, -1: the query failed.
inline int stream_idle(int device, emStream_t stream) {
  int idle = -1;
  return emStreamQuery(device, stream, &idle) == emSuccess ? idle : -1;
}

// 1: the latest record completed, 0: pending, -1: the query failed.
inline int event_done(emSyncEvent_t event) {
  int done = -1;
  return emSyncEventQuery(event, &done) == emSuccess ? done : -1;
}

inline bool detail_has(emError_t error, const char* text) {
  return std::strstr(emGetErrorDetail(error), text) != nullptr;
}

// The tests, by file (main.cpp runs them, in the order they were written).
// device_tests.cpp
void test_devices();
void test_threads();
void test_error_strings();
// memory_tests.cpp
void test_malloc_free_stats();
void test_copies();
void test_bad_free_and_oom();
void test_free_returns_memory();
void test_capacity(size_t capacity);
void test_fork();
// vmm_tests.cpp
void test_vmm();
// launch_tests.cpp
void test_kernel_launch();
void test_free_while_kernel_runs();
// stream_tests.cpp
void test_stream_api_and_errors();
void test_async_returns_before_completion();
void test_stream_ordering();
void test_kernel_holds_its_stream();
void test_device_synchronize();
void test_free_with_queued_work();
void test_wait_inside_kernel();
void test_fork_with_streams();
// event_tests.cpp
void test_cross_stream_wait();
void test_sync_events();
// tracer_tests.cpp
void test_event_callback();
void test_stream_trace_events();
// activity_tests.cpp
void test_activities();

// graph_tests.cpp
void test_graphs();
// async_tests.cpp
void test_async_kernels();
void test_kernel_failure();
// link_tests.cpp
void test_links();
