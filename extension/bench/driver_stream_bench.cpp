// What streams and sync events cost, measured (run by driver_bench.py).
//
// Launch overhead on the default stream and on a created one (a stream whose
// worker thread exists and is idle), event record + synchronize on an idle
// stream (no worker involved) and through a worker (the host waits for the
// worker to reach the event: two thread handoffs), queueing costs, and an
// event timing of a 1 ms sleep. Medians of repeated runs, in microseconds.

#include "bench_timing.h"
#include "ember_driver.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(emError_t status, const char* what) {
  if (status != emSuccess) {
    std::fprintf(stderr, "%s failed: %s: %s\n", what, emGetErrorString(status),
                 emGetErrorDetail(status));
    std::exit(1);
  }
}

void empty_kernel(void*) {}

} // namespace

int main() {
  void* buffer = nullptr;
  check(emMalloc(&buffer, 4096), "emMalloc");
  void* const buffers[] = {buffer};
  emStream_t side = 0;
  check(emStreamCreate(0, &side), "emStreamCreate");
  // Give the side stream its worker thread (then idle).
  check(emSleepAsync(0, 0, side), "emSleepAsync");
  check(emStreamSynchronize(0, side), "emStreamSynchronize");

  const auto launch = [&] {
    emLaunchKernel(empty_kernel, nullptr, buffers, 1);
  };
  const auto on_side = [&] {
    emSetStream(0, side);
    emLaunchKernel(empty_kernel, nullptr, buffers, 1);
    emSetStream(0, 0);
  };
  const auto [launch_default, launch_side] =
      paired_median_us(launch, on_side, 15, 2000);
  const double set_stream_pair = median_us(
      [&] {
        emSetStream(0, side);
        emSetStream(0, 0);
      },
      15, 2000);

  emSyncEvent_t event = 0;
  emSyncEvent_t untimed = 0;
  check(emSyncEventCreate(0, &event, emSyncEventDefault), "emSyncEventCreate");
  check(emSyncEventCreate(0, &untimed, emSyncEventDisableTiming),
        "emSyncEventCreate");
  const double record_idle = median_us(
      [&] {
        emSyncEventRecord(event, 0, side);
        emSyncEventSynchronize(event);
      },
      15, 2000);
  // Something queued ahead: the worker reaches the event, the host waits.
  const double record_worker = median_us(
      [&] {
        emSleepAsync(0, 0, side);
        emSyncEventRecord(untimed, 0, side);
        emSyncEventSynchronize(untimed);
      },
      15, 200);
  int idle = 0;
  const double query =
      median_us([&] { emStreamQuery(0, side, &idle); }, 15, 2000);
  // Queueing alone: sleeps of 0 us, drained between batches.
  const double enqueue = median_us(
      [&] {
        for (int i = 0; i < 100; ++i) emSleepAsync(0, 0, side);
        emStreamSynchronize(0, side);
      },
      15, 5) / 100;

  // Event timing of a 1 ms sleep.
  emSyncEvent_t end = 0;
  check(emSyncEventCreate(0, &end, emSyncEventDefault), "emSyncEventCreate");
  std::vector<float> timed;
  for (int i = 0; i < 11; ++i) {
    check(emSyncEventRecord(event, 0, side), "emSyncEventRecord");
    check(emSleepAsync(1000, 0, side), "emSleepAsync");
    check(emSyncEventRecord(end, 0, side), "emSyncEventRecord");
    check(emSyncEventSynchronize(end), "emSyncEventSynchronize");
    float ms = 0;
    check(emSyncEventElapsedTime(&ms, event, end), "emSyncEventElapsedTime");
    timed.push_back(ms);
  }
  std::sort(timed.begin(), timed.end());

  for (emSyncEvent_t e : {event, untimed, end}) {
    check(emSyncEventDestroy(e), "emSyncEventDestroy");
  }
  check(emFree(buffer), "emFree");

  std::printf("emLaunchKernel, empty, default stream        %8.2f us\n",
              launch_default);
  std::printf("emLaunchKernel, empty, created stream        %8.2f us"
              "  (with emSetStream there and back: %.2f us of it)\n",
              launch_side, set_stream_pair);
  std::printf("event record + synchronize, idle stream      %8.2f us\n",
              record_idle);
  std::printf("event record + synchronize through a worker  %8.2f us\n",
              record_worker);
  std::printf("emStreamQuery                                %8.2f us\n",
              query);
  std::printf("queueing one async op (emSleepAsync of 0)    %8.2f us\n",
              enqueue);
  std::printf("event timing of emSleepAsync(1000 us)        %8.3f ms"
              "  (median of %zu)\n",
              timed[timed.size() / 2], timed.size());
  return 0;
}
