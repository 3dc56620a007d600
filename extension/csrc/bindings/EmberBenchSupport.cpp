// What the benchmark (torch_ember/bench.py) needs from inside the backend,
// exported with C linkage and called through ctypes, like the driver's API.
//
// - A count of the calls that reach the CPU fallback. It is a fallback check
//   (csrc/aten/EmberFallback.cpp runs every registered check before it copies
//   anything), so it sees exactly the calls the fallback handles, whichever
//   way they got there: directly from the dispatcher, or from inside another
//   kernel (a composite kernel's pieces, a backward formula).
// - A timing loop of allocate+free pairs (optionally writing the memory in
//   between), through the allocator PyTorch uses for ember tensors
//   (c10::GetAllocator) or through the raw driver (emMalloc/emFree), so the
//   two are compared without Python in between.
//
// Not shown in the book: nothing here is part of the backend's behaviour.
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "aten/EmberLaunch.h"
#include "aten/EmberRecordedLaunch.h"
#include "driver/ember_driver.h"

namespace ember {

// Defined with the fallback (csrc/aten/EmberFallback.cpp, region cpu_fallback).
using FallbackCheck = void (*)(const c10::OperatorHandle& op,
                               c10::ArrayRef<c10::IValue> arguments);
std::vector<FallbackCheck>& fallbackChecks();

namespace {

std::atomic<uint64_t> fallback_calls{0};
// The names of the operators that fell back, in call order, while recording
// is on (the benchmark reports which operators a training step sends there).
std::atomic<bool> recording{false};
std::mutex names_mutex;
std::vector<std::string> fallback_names;

void countFallbackCall(const c10::OperatorHandle& op,
                       c10::ArrayRef<c10::IValue> /*arguments*/) {
  fallback_calls.fetch_add(1, std::memory_order_relaxed);
  if (recording.load(std::memory_order_relaxed)) {
    std::lock_guard<std::mutex> lock(names_mutex);
    fallback_names.push_back(c10::toString(op.operator_name()));
  }
}

// Registered while _C loads, like the fallback's own checks. It never raises,
// so it changes nothing about which calls the fallback accepts.
const bool registered = [] {
  fallbackChecks().push_back(&countFallbackCall);
  return true;
}();

// A kernel, launched as every ember kernel is (ember::launch): one byte
// written in every 4 KiB page of the buffer. false if the launch failed.
bool touchPages(void* device_ptr, size_t nbytes) {
  try {
    launchRecorded({device_ptr}, [=](ptrdiff_t offset) {
      char* data = atOffset(static_cast<char*>(device_ptr), offset);
      for (size_t i = 0; i < nbytes; i += 4096) {
        data[i] = 1;
      }
    });
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

} // namespace
} // namespace ember

extern "C" {

// Calls that reached the CPU fallback since _C loaded.
uint64_t emberBenchFallbackCalls() {
  return ember::fallback_calls.load(std::memory_order_relaxed);
}

// Starts (on != 0, clearing the list) or stops recording the fallback's
// operator names.
void emberBenchRecordFallbackNames(int on) {
  std::lock_guard<std::mutex> lock(ember::names_mutex);
  if (on != 0) {
    ember::fallback_names.clear();
  }
  ember::recording.store(on != 0, std::memory_order_relaxed);
}

// Copies the recorded names, newline-separated, into `buffer` (at most
// `size` bytes with the terminating zero); returns the bytes needed.
size_t emberBenchFallbackNames(char* buffer, size_t size) {
  std::lock_guard<std::mutex> lock(ember::names_mutex);
  std::string joined;
  for (const std::string& name : ember::fallback_names) {
    joined += name;
    joined += '\n';
  }
  if (buffer != nullptr && size > 0) {
    const size_t n = joined.size() < size - 1 ? joined.size() : size - 1;
    joined.copy(buffer, n);
    buffer[n] = '\0';
  }
  return joined.size() + 1;
}

// Runs `pairs` allocate+free pairs of `nbytes` on the current ember device,
// through PyTorch's allocator for ember (raw == 0) or the driver (raw != 0),
// and stores the elapsed seconds. With `touch` != 0, a kernel writes one byte
// of every page of each allocation before it is freed: what using fresh
// memory costs (the driver's emFree returns the pages to the OS, so a new
// driver allocation faults them in again; a cached block keeps them).
// Returns 0, or -1 if a call failed (no exception crosses this C boundary).
int emberBenchAllocFree(size_t nbytes, int pairs, int raw, int touch,
                        double* seconds) {
  try {
    using Clock = std::chrono::steady_clock;
    c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::PrivateUse1);
    const Clock::time_point start = Clock::now();
    for (int i = 0; i < pairs; ++i) {
      if (raw != 0) {
        void* ptr = nullptr;
        if (emMalloc(&ptr, nbytes) != emSuccess ||
            (touch != 0 && !ember::touchPages(ptr, nbytes)) ||
            emFree(ptr) != emSuccess) {
          return -1;
        }
      } else {
        // The DataPtr's deleter frees when it goes out of scope.
        c10::DataPtr data = allocator->allocate(nbytes);
        if (data.get() == nullptr ||
            (touch != 0 && !ember::touchPages(data.get(), nbytes))) {
          return -1;
        }
      }
    }
    *seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return 0;
  } catch (const std::exception&) {
    return -1;
  }
}

} // extern "C"
