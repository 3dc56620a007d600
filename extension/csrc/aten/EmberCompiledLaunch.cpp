// Launching a kernel Inductor generated (torch.compile on ember).
//
// Inductor's C++ code generator writes a kernel as a plain C function over
// raw pointers, compiled into its own shared library that knows nothing of
// PyTorch or of ember. Ember's scheduling (torch_ember/compiler/) wraps that
// function in an entry that hands it to emberLaunchCompiled: a C function, so
// the generated library can call it through a bare function pointer, which it
// reads from the environment when it loads (the way Inductor itself hands its
// kernels the address of a helper in libtorch).
#include <c10/core/DeviceGuard.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstring>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"

// ember-book: begin compiled_launch
namespace ember {
namespace {

// The message of the calling thread's latest failed launch: the C boundary
// returns a pointer into it, which stays valid until that thread's next call.
thread_local std::string lastCompiledError;
// What a generated body threw, caught before it could cross the driver.
thread_local std::string compiledBodyError;

// The ember device a generated kernel runs on: the one that holds its
// buffers (a kernel with none runs on the current device). A CPU tensor, or
// buffers on two ember devices, are clear errors here, not faults inside
// generated code.
int compiledKernelDevice(const char* kernel,
                         c10::ArrayRef<const void*> buffers) {
  int device = -1;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (buffers[i] == nullptr) {
      continue; // an empty tensor's data
    }
    int owner = -1;
    TORCH_CHECK(emPointerGetDevice(buffers[i], &owner) == emSuccess,
                "ember: compiled kernel ", kernel, ": pointer argument ", i,
                " is not ember memory (a tensor on another device type?)");
    TORCH_CHECK(device < 0 || owner == device, "ember: compiled kernel ",
                kernel, " got pointer arguments on ember:", device,
                " and ember:", owner, " (one kernel runs on one device)");
    device = owner;
  }
  if (device < 0) {
    EMBER_CHECK(emGetDevice(&device));
  }
  return device;
}

// A compiled kernel is launched by value: the driver copies its argument, a
// call record (the body, then the packed arguments of the generated entry),
// as a GPU driver copies a kernel's parameters. A stream capturing a graph
// keeps that copy and runs it again at every replay, so the record holds no
// pointer to this frame.
using CompiledBody = void (*)(void* args, ptrdiff_t offset);
constexpr size_t kArgsAt = 16; // the packed arguments start aligned

void runCompiled(void* record) {
  CompiledBody body = nullptr;
  std::memcpy(&body, record, sizeof body);
  try {
    ptrdiff_t offset = 0;
    EMBER_CHECK(emGetKernelOffset(&offset));
    body(static_cast<unsigned char*>(record) + kArgsAt, offset);
  } catch (const c10::Error& error) {
    compiledBodyError = error.what_without_backtrace();
  } catch (const std::exception& error) {
    compiledBodyError = error.what();
  }
}

} // namespace

// The error a compiled body raised in this thread's latest launch or replay
// ("" if none), cleared.
std::string takeCompiledBodyError() {
  return std::exchange(compiledBodyError, std::string());
}

} // namespace ember

// Runs body(args, offset) as one ember launch on its buffers' device (on
// that device's current stream): `buffers` are the device pointers the kernel
// touches, and body reaches them at pointer + offset (device memory stays
// unreadable outside the launch). `args` (args_size bytes) is copied, so a
// capturing stream can record the launch. Returns nullptr on success, else
// the error's message; nothing throws across this C boundary.
extern "C" const char* emberLaunchCompiled(
    const char* kernel,
    const void* const* buffers,
    size_t num_buffers,
    void (*body)(void* args, ptrdiff_t offset),
    const void* args,
    size_t args_size) {
  try {
    const c10::ArrayRef<const void*> pointers(buffers, num_buffers);
    // Inductor sets no device around a kernel call for a device it does not
    // know as a GPU: the launch switches to its buffers' device for its span.
    const c10::DeviceGuard guard(c10::Device(
        c10::DeviceType::PrivateUse1,
        static_cast<c10::DeviceIndex>(
            ember::compiledKernelDevice(kernel, pointers))));
    std::vector<unsigned char> record(ember::kArgsAt + args_size);
    std::memcpy(record.data(), &body, sizeof body);
    std::memcpy(record.data() + ember::kArgsAt, args, args_size);
    emSetNextLaunchName(kernel); // what a profiler calls this kernel
    EMBER_CHECK(emLaunchKernelByValue(
        &ember::runCompiled, record.data(), record.size(),
        const_cast<void* const*>(buffers), num_buffers));
    std::string thrown = ember::takeCompiledBodyError();
    TORCH_CHECK(thrown.empty(), "ember: compiled kernel ", kernel, ": ", thrown);
    return nullptr;
  } catch (const c10::Error& error) {
    ember::lastCompiledError = error.what_without_backtrace();
  } catch (const std::exception& error) {
    ember::lastCompiledError = error.what();
  }
  return ember::lastCompiledError.c_str();
}
// ember-book: end compiled_launch
