// Devices: the count, the per-thread current device, and the driver used from
// several host threads at once; the error strings.

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

  // A call's error detail is its own: after a set that succeeds, an earlier
  // call's detail for the same code is gone.
  emStream_t stream = -1;
  CHECK_EM(emStreamCreate(5, &stream), emErrorInvalidDevice);
  CHECK(detail_has(emErrorInvalidDevice, "device index 5 is out of range"));
  CHECK_OK(emSetDevice(1));
  CHECK(std::strcmp(emGetErrorDetail(emErrorInvalidDevice), "") == 0);
  CHECK_EM(emSetDevice(7), emErrorInvalidDevice);
  CHECK(detail_has(emErrorInvalidDevice, "device index 7 is out of range"));
  CHECK_OK(emMemResetPeak(0));
  CHECK(std::strcmp(emGetErrorDetail(emErrorInvalidDevice), "") == 0);

  // The current device is per thread: a new thread starts at 0.
  int other = -1;
  std::thread([&] { emGetDevice(&other); }).join();
  CHECK(other == 0);
  CHECK_OK(emSetDevice(0));
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
                      emErrorMemoryAllocation, emErrorStreamCapture,
                      emErrorLaunchFailure}) {
    CHECK(std::strcmp(emGetErrorString(e), "unknown ember error") != 0);
  }
  // The "unknown ember error" fallback is for C callers: in C++ no value
  // outside 0..7 can be formed in an emError_t without undefined behavior.
}
