// Sync events: streams ordered against each other by events, and the events
// themselves (record, query, synchronize, elapsed time, their errors).

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
