// Kernels whose arithmetic is ATen's CPU code, run inside an ember launch on
// the device's own memory: what the capstone chapter's normalization, pooling and loss
// kernels (and the revised kernels of the chapters from stub_kernels to convolution) are written with.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <exception>
#include <initializer_list>
#include <optional>

#include "aten/EmberLaunch.h"

// ember-book: begin host_kernels
namespace ember {

// The simulated device computes with the host's processor: a kernel's code
// is host code that reads and writes device memory at the launch's offset
// (chapter 04). So a kernel may hand that memory to ATen's CPU kernels, the
// way a real backend hands its memory to the vendor's libraries (cuDNN,
// cuBLAS, oneDNN): inside the launch, a HostView makes a CPU tensor over the
// same bytes as an ember tensor, no copy. Outside a launch those CPU tensors
// would point at protected pages, so they never leave the kernel.
class HostView {
 public:
  explicit HostView(ptrdiff_t offset) : offset_(offset) {}

  at::Tensor operator()(const at::Tensor& t) const {
    if (!t.defined() || !t.is_privateuseone()) {
      return t; // a CPU scalar (the 2 in `x * 2`) is host memory already
    }
    char* data = static_cast<char*>(t.data_ptr());
    return at::from_blob(data == nullptr ? data : data + offset_, t.sizes(),
                         t.strides(), t.options().device(at::kCPU));
  }
  std::optional<at::Tensor> operator()(const std::optional<at::Tensor>& t) const {
    if (!t.has_value()) {
      return t;
    }
    return (*this)(*t);
  }

 private:
  ptrdiff_t offset_;
};

// An optional tensor argument, or an undefined tensor in its place.
inline const at::Tensor& orUndefined(const std::optional<at::Tensor>& t) {
  static const at::Tensor undefined;
  return t.has_value() ? *t : undefined;
}

// Refuses a tensor that is not on `device`, naming the operator
// (EmberHostKernel.cpp: compiled once, not in every onHost).
void checkOnDevice(const char* op, c10::Device device, const at::Tensor& t);

// Runs body(view) as one ember kernel over `tensors` (every ember tensor the
// body reads or writes, inputs and outputs alike; null, undefined and 0-dim
// CPU ones are skipped). They must be on `device`: checked here, before the launch,
// with the operator's name. An error the CPU code raises inside (a target
// index out of range, ...) gets a line naming the operator and the device.
template <typename Body>
void onHost(const char* op, c10::Device device,
            c10::ArrayRef<const at::Tensor*> tensors, const Body& body) {
  c10::SmallVector<const void*, 8> buffers;
  for (const at::Tensor* t : tensors) {
    if (t != nullptr && t->defined() && !(t->is_cpu() && t->dim() == 0)) {
      checkOnDevice(op, device, *t);
      buffers.push_back(t->data_ptr());
    }
  }
  launch(buffers, [&](ptrdiff_t offset) {
    try {
      body(HostView(offset));
    } catch (c10::Error& e) {
      // Same error type (an IndexError stays one), one more line.
      e.add_context(c10::str("ember: in ", op, " on ", device));
      throw;
    }
  });
}

// The boxed host kernel (host_kernel, EmberHostKernel.cpp): any operator
// computed by the CPU's kernel on host views of ember's memory. Chapter 04's
// kernels, as this chapter revises them, send it the dtypes their loops are
// not compiled for: loopsCompute says whether the loops take every tensor.
bool loopsCompute(std::initializer_list<at::Tensor> tensors);
void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace ember
// ember-book: end host_kernels
