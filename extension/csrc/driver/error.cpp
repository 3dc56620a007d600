// Errors: what emGetErrorString says for each code, and the per-thread detail
// behind emGetErrorDetail. A code alone ("invalid argument") cannot say which
// stream or device index was wrong; the detail can, and every layer above
// reports it (EMBER_CHECK in the runtime, the Python device module).

#include "internal.h"

#include <cstdarg>
#include <cstdio>

namespace ember::driver::detail {
namespace {

// What went wrong in this thread's latest failed call, for emGetErrorDetail.
// The detail belongs to one error code: a later failure with another code
// (or any later call: each starts by clearing it, EntryPoint) does not show
// stale text.
struct ErrorDetail {
  emError_t code = emSuccess;
  char text[192] = "";
};
thread_local ErrorDetail error_detail;

} // namespace

EntryPoint::EntryPoint() {
  error_detail.code = emSuccess;
}

emError_t fail(emError_t code, const char* format, ...) {
  va_list args;
  va_start(args, format);
  std::vsnprintf(error_detail.text, sizeof(error_detail.text), format, args);
  va_end(args);
  error_detail.code = code;
  return code;
}

emError_t invalid_device(int device) {
  return fail(emErrorInvalidDevice,
              "device index %d is out of range: there are %d ember devices "
              "(0..%d)",
              device, kNumDevices, kNumDevices - 1);
}

} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

const char* emGetErrorString(emError_t error) {
  switch (error) {
    case emSuccess:
      return "no error";
    case emErrorInvalidDevice:
      return "invalid device ordinal";
    case emErrorInvalidValue:
      return "invalid argument";
    case emErrorMemoryAllocation:
      return "out of memory";
    case emErrorStreamCapture:
      return "operation not permitted when stream is capturing";
    case emErrorLaunchFailure:
      return "an asynchronous kernel failed";
  }
  return "unknown ember error";
}

const char* emGetErrorDetail(emError_t error) {
  return error != emSuccess && error == error_detail.code ? error_detail.text
                                                          : "";
}

} // extern "C"
