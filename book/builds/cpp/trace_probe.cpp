// The probe behind book.trace(): records what the dispatcher and the ember
// driver do on one thread while a function runs.
//
// It is not part of the ember backend. book/display/widgets/probe.py compiles it once
// per machine (with the chapters' compiler flags, linked against the same
// ember driver library), loads it for the life of the process, and talks to it
// through three C functions over ctypes:
//
//   ember_probe_start()  start recording on the calling thread
//   ember_probe_stop()   stop; returns the records as a JSON array (malloc'd)
//   ember_probe_free(p)  free what ember_probe_stop() returned
//
// Operator calls come from an at::RecordFunction callback. The dispatcher runs
// RecordFunction in Dispatcher::call and callBoxed, never in redispatch: the
// probe sees each operator call once, with the arguments it was called with,
// and each nested call a kernel makes, but not the hops from one dispatch key
// to the next within a call. For each call it records, as raw DispatchKeySet
// bits, the key set the dispatcher starts from (the arguments' keys plus the
// thread-local included keys, minus the excluded ones), taken while the call
// starts, so under the same thread-local state. Python masks out the
// operator's fallthrough keys, as DispatchKeyExtractor does, and reconstructs
// the redispatches from the operator's dispatch table
// (book/display/widgets/dispatch_trace.py).
//
// Device events come from the ember driver's event callback (emSetEventCallback),
// which the probe owns while it records.
//
// Compiled like a chapter build (with -DNDEBUG, as libtorch is: without it
// at::RecordFunction has a debug-only member and disagrees with libtorch about
// its layout), so it reuses the chapters' precompiled prelude.
#include "prelude.h"

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/TensorOptions.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "driver/ember_driver.h"

namespace {

// What one recording collects: a JSON array in the making.
struct Recording {
  std::string json = "[";
  bool first = true;
  int depth = 0; // operator calls open right now

  void add(const std::string& record) {
    if (!first) json += ",";
    json += record;
    first = false;
  }
};

// Non-null while the calling thread records. Only this thread's operator calls
// (the RecordFunction callback is thread local) and driver events (the driver
// calls back on the thread that made the driver call) are recorded.
thread_local std::unique_ptr<Recording> recording;
// Set while the probe itself runs, so that nothing it does is recorded.
thread_local bool inside_probe = false;
at::CallbackHandle callback_handle = at::INVALID_CALLBACK_HANDLE;

struct InsideProbe {
  InsideProbe() { inside_probe = true; }
  ~InsideProbe() { inside_probe = false; }
  InsideProbe(const InsideProbe&) = delete;
  InsideProbe& operator=(const InsideProbe&) = delete;
};

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The union of the key sets of the call's tensor arguments (tensors, optional
// tensors, tensor lists, lists of optional tensors) and, if asked, generators:
// what c10::detail::MultiDispatchKeySet collects.
c10::DispatchKeySet argument_keys(c10::ArrayRef<const c10::IValue> inputs,
                                  bool generators) {
  c10::DispatchKeySet keys;
  auto add = [&keys, generators](const c10::IValue& value) {
    if (value.isTensor()) {
      keys = keys | value.toTensor().key_set();
    } else if (generators && value.isGenerator()) {
      const at::Generator& generator = value.toGenerator();
      if (generator.defined()) keys = keys | generator.key_set();
    }
  };
  for (const c10::IValue& input : inputs) {
    if (input.isList()) {
      for (const c10::IValue& element : input.toListRef()) add(element);
    } else {
      add(input);
    }
  }
  return keys;
}

// What the dispatcher computes when it is called (Dispatcher::call and
// callBoxed): the arguments' keys, then thread-local include/exclude, as
// c10::impl::computeDispatchKeySet does. It then masks out the keys where the
// operator has a fallthrough (DispatchKeyExtractor's nonFallthroughKeys_, not
// reachable from outside): Python does that step, from the computed dispatch
// table. Generators count, as in the unboxed call (MultiDispatchKeySet); the
// boxed extractor ignores them, which changes nothing for a CPU generator
// next to tensors.
c10::DispatchKeySet dispatch_keys(c10::ArrayRef<const c10::IValue> inputs) {
  const c10::impl::LocalDispatchKeySet local =
      c10::impl::tls_local_dispatch_key_set();
  return (argument_keys(inputs, /*generators=*/true) | local.included_) -
      local.excluded_;
}

// Tensor, Tensor?, Tensor[] or Tensor?[]: what torchgen calls tensor-like.
bool is_tensor_like(c10::TypePtr type) {
  if (const auto* optional = type->castRaw<c10::OptionalType>()) {
    type = optional->getElementType();
  }
  if (const auto* list = type->castRaw<c10::ListType>()) {
    type = list->getElementType();
    if (const auto* optional = type->castRaw<c10::OptionalType>()) {
      type = optional->getElementType();
    }
  }
  return type->kind() == c10::TypeKind::TensorType;
}

// Operators with dtype/layout/device arguments have a BackendSelect kernel
// (generated into RegisterBackendSelect.cpp) that redispatches with a key set
// it computes from those arguments. Compute the same set here, so Python can
// follow the hop:
//   no tensor arguments:  {computeDispatchKey(dtype, layout, device)}
//   tensor arguments too: that key | the tensors' keys, after thread-local
//                         include/exclude, restricted to keys below
//                         BackendSelect
std::optional<c10::DispatchKeySet> backend_select_keys(
    const c10::OperatorName& name,
    c10::ArrayRef<const c10::IValue> inputs) {
  const auto op = c10::Dispatcher::singleton().findSchema(name);
  if (!op.has_value()) return std::nullopt;
  const auto& arguments = op->schema().arguments();
  std::optional<at::ScalarType> dtype;
  std::optional<at::Layout> layout;
  std::optional<at::Device> device;
  bool has_device_argument = false;
  bool has_tensor_argument = false;
  std::vector<c10::IValue> tensors;
  for (size_t i = 0; i < arguments.size() && i < inputs.size(); ++i) {
    const std::string& arg = arguments[i].name();
    const c10::IValue& value = inputs[i];
    if (is_tensor_like(arguments[i].type())) {
      has_tensor_argument = true;
      tensors.push_back(value);
    } else if (arg == "device") {
      has_device_argument = true;
      if (value.isDevice()) device = value.toDevice();
    } else if (arg == "dtype" && value.isInt()) {
      dtype = static_cast<at::ScalarType>(value.toInt());
    } else if (arg == "layout" && value.isInt()) {
      layout = static_cast<at::Layout>(value.toInt());
    }
  }
  if (!has_device_argument) return std::nullopt;
  const c10::DispatchKeySet key(c10::computeDispatchKey(dtype, layout, device));
  if (!has_tensor_argument) return key;
  return c10::impl::computeDispatchKeySet(
      key |
          argument_keys(
              c10::ArrayRef<const c10::IValue>(tensors.data(), tensors.size()),
              /*generators=*/false),
      c10::DispatchKeySet(
          c10::DispatchKeySet::FULL_AFTER, c10::DispatchKey::BackendSelect));
}

// A key set as its raw bits (a JSON integer): Python rebuilds it exactly with
// torch._C.DispatchKeySet.from_raw_repr. A list of key names would lose the
// bits that name no runtime key (a functionality with no backend bit).
std::string raw_keys(c10::DispatchKeySet keys) {
  return std::to_string(keys.raw_repr());
}

// Marks a call the probe recorded, so the end callback knows to close it.
struct Recorded final : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_call(const at::RecordFunction& fn) {
  if (recording == nullptr || inside_probe) return nullptr;
  const auto name = fn.operator_name();
  if (!name.has_value()) return nullptr; // a RECORD_FUNCTION scope, not an op
  const InsideProbe scope;
  std::string record = "{\"k\":\"call\",\"name\":" + quoted(name->name) +
      ",\"overload\":" + quoted(name->overload_name) +
      ",\"depth\":" + std::to_string(recording->depth);
  const c10::DispatchKeySet keys = dispatch_keys(fn.inputs());
  record += ",\"keys\":" + raw_keys(keys);
  if (keys.has(c10::DispatchKey::BackendSelect)) {
    if (const auto redispatch = backend_select_keys(*name, fn.inputs())) {
      record += ",\"backend_select\":" + raw_keys(*redispatch);
    }
  }
  record += "}";
  recording->add(record);
  ++recording->depth;
  return std::make_unique<Recorded>();
}

void on_return(const at::RecordFunction&, at::ObserverContext* context) {
  // Also runs when the kernel threw: RecordFunction ends in its destructor.
  if (context == nullptr || recording == nullptr) return;
  recording->add("{\"k\":\"end\"}");
  --recording->depth;
}

const char* copy_direction(emMemcpyKind kind) {
  switch (kind) {
    case emMemcpyHostToDevice:
      return "H2D";
    case emMemcpyDeviceToHost:
      return "D2H";
    case emMemcpyDeviceToDevice:
      return "D2D";
  }
  return "?";
}

// Pointers are not recorded: the trace must read the same on every run.
void on_driver_event(const emEvent* event, void* /*user*/) {
  if (recording == nullptr || inside_probe) return;
  std::string record = "{\"k\":";
  switch (event->kind) {
    case emEventMalloc:
      record += "\"malloc\"";
      break;
    case emEventFree:
      record += "\"free\"";
      break;
    case emEventMemcpy:
      record += "\"memcpy\",\"direction\":\"";
      record += copy_direction(event->memcpy_kind);
      record += "\",\"peer\":" + std::to_string(event->peer_device);
      break;
    case emEventKernelLaunch:
      record += "\"launch\",\"buffers\":" + std::to_string(event->num_buffers);
      break;
  }
  record += ",\"device\":" + std::to_string(event->device) +
      ",\"bytes\":" + std::to_string(event->bytes) + "}";
  recording->add(record);
}

} // namespace

extern "C" {

// 0: recording. 1: this process is already recording (one trace at a time).
int ember_probe_start() {
  if (callback_handle != at::INVALID_CALLBACK_HANDLE) return 1;
  recording = std::make_unique<Recording>();
  emSetEventCallback(&on_driver_event, nullptr);
  callback_handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(&on_call, &on_return)
          .needsInputs(true)
          .scopes({at::RecordScope::FUNCTION}));
  return 0;
}

// The records as a JSON array, or nullptr if this thread is not recording.
// The caller owns the string: release it with ember_probe_free.
char* ember_probe_stop() {
  if (recording == nullptr) return nullptr;
  at::removeCallback(callback_handle);
  callback_handle = at::INVALID_CALLBACK_HANDLE;
  emSetEventCallback(nullptr, nullptr);
  const std::unique_ptr<Recording> done = std::move(recording);
  done->json += "]";
  char* out = static_cast<char*>(std::malloc(done->json.size() + 1));
  if (out != nullptr) std::memcpy(out, done->json.c_str(), done->json.size() + 1);
  return out;
}

void ember_probe_free(char* json) {
  std::free(json);
}

} // extern "C"
