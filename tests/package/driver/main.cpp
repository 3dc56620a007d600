// The ember driver's self-test: a plain C++ program that checks the C API of
// ember_driver.h, area by area (one *_tests.cpp file each, as the driver has
// one source file per area). Built with the driver's sources and run by
// test_driver_selftest.py; by hand, from the repository root:
//   c++ -std=c++17 -O1 -pthread -Iextension/csrc/driver
//       extension/csrc/driver/*.cpp tests/package/driver/*.cpp -o /tmp/t
//   /tmp/t [expected per-device capacity in bytes]
// Exits non-zero, after printing "FAIL file line N: ..." for each failed
// check, if any check fails.

#include "selftest.h"

#include <cstdlib>

// argv[1]: the per-device capacity the driver should have (bytes); default
// 4 GiB. test_driver_selftest.py runs this program with and without
// EMBER_DEVICE_MEMORY_BYTES. The order matters where a test expects a fresh
// process (test_devices: the current device starts at 0).
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
  test_activities();
  test_graphs();
  test_vmm();
  test_async_kernels();
  test_kernel_failure();
  test_links();
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
