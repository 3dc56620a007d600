// Running ATen's TensorIterator loops as ember kernels: the elementwise loops
// the STUB kernels are written with (launched by EmberLaunch.h), and the RAII
// slot registration for a DispatchStub's PrivateUse1 entry.
#pragma once

#include <ATen/native/DispatchStub.h>
#include <ATen/native/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/FunctionRef.h>
#include <c10/util/SmallVector.h>

#include <array>

#include "aten/EmberLaunch.h"

// ember-book: begin stub_registration
namespace ember {

// REGISTER_PRIVATEUSE1_DISPATCH(stub, fn) sets the stub's PrivateUse1 slot in
// a static initializer and never clears it. A DispatchStub lives in libtorch
// and outlives us: once our code is unloaded (the book retires every build it
// replaces), the slot would point into code that must not run again. This
// object sets the slot when the library loads and empties it when the
// library's static destructors run; an empty slot makes the stub raise
// "DispatchStub: missing kernel for privateuseone" instead.
template <typename Stub>
class PrivateUse1StubSlot {
 public:
  PrivateUse1StubSlot(Stub& stub, typename Stub::FnPtr kernel) : stub_(stub) {
    stub_.set_privateuse1_dispatch_ptr(kernel);
  }
  ~PrivateUse1StubSlot() {
    stub_.set_privateuse1_dispatch_ptr(nullptr);
  }
  PrivateUse1StubSlot(const PrivateUse1StubSlot&) = delete;
  PrivateUse1StubSlot& operator=(const PrivateUse1StubSlot&) = delete;

 private:
  Stub& stub_;
};

} // namespace ember

// One line per stub, like ATen's REGISTER_PRIVATEUSE1_DISPATCH(stub, fn). A
// stub is an object of its own struct type (DECLARE_DISPATCH), so decltype
// names the template argument.
#define EMBER_REGISTER_STUB(stub, kernel)                                  \
  static ::ember::PrivateUse1StubSlot<decltype(at::native::stub)>          \
      ember_stub_slot_##stub(at::native::stub, kernel)
// ember-book: end stub_registration

// ember-book: begin dtype_dispatch
namespace ember {

[[noreturn]] inline void noKernelFor(const char* op, at::ScalarType type,
                                     const char* supported) {
  TORCH_CHECK(false, "ember: ", op, " has no ember kernel for ", type,
              " tensors on ", c10::get_privateuse1_backend(),
              " (ember computes it in ", supported, ")");
}

// The dtypes ember's kernels are compiled for. Each entry is one more copy of
// every loop in the binary, so the lists are short on purpose; anything else
// gets an error naming the operator, the dtype and the device.
template <typename F>
void dispatchFloating(const char* op, at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    default: noKernelFor(op, type, "Float and Double");
  }
}

template <typename F>
void dispatchNumbers(const char* op, at::ScalarType type, F&& f) {
  switch (type) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kLong: return f(int64_t{});
    default: noKernelFor(op, type, "Float, Double and Long");
  }
}

// Arithmetic and comparisons on bool tensors too: a mask times a mask is how
// torch.isfinite (and so printing a tensor) combines its conditions.
template <typename F>
void dispatchNumbersAndBool(const char* op, at::ScalarType type, F&& f) {
  if (type == at::kBool) {
    return f(bool{});
  }
  switch (type) {
    case at::kFloat: return f(float{});
    case at::kDouble: return f(double{});
    case at::kLong: return f(int64_t{});
    default: noKernelFor(op, type, "Float, Double, Long and Bool");
  }
}

} // namespace ember
// ember-book: end dtype_dispatch

// ember-book: begin elementwise
namespace ember {

// A row of an elementwise loop: n elements, operand k at data[k] with byte
// stride strides[k], every pointer ready to use. params: the op's constants.
using RowLoop = void (*)(char* const* data, const int64_t* strides, int64_t n,
                         const void* params);

// Outside the CPU, TensorIterator computes the common dtype and checks the
// promotion, but leaves converting to the kernel: an int tensor added to a
// float tensor arrives as is, and so does an out= tensor of another dtype.
inline bool needsCasts(const at::TensorIteratorBase& iter,
                       at::ScalarType compute, at::ScalarType result) {
  if (iter.dtype(0) != result) {
    return true;
  }
  for (int i = iter.noutputs(); i < iter.ntensors(); ++i) {
    if (iter.dtype(i) != compute && !iter.is_cpu_scalar(i)) {
      return true;
    }
  }
  return false;
}

// Runs row over every element of iter (one output, any number of inputs)
// on the device. Each call of the for_each body gets a run of elements (a
// chunk of one row: for_each splits the work among threads).
inline void elementwise(const char* op, at::TensorIteratorBase& iter,
                        at::ScalarType compute, at::ScalarType result,
                        RowLoop row, const void* params) {
  if (iter.numel() == 0) {
    return;
  }
  if (needsCasts(iter, compute, result)) {
    // Convert the inputs, compute into a temporary of the result dtype, copy
    // it into the real output (both conversions are ember copies).
    const at::Tensor& out = iter.output(0);
    at::Tensor tmp = at::empty(out.sizes(), out.options().dtype(result));
    at::TensorIteratorConfig config;
    config.check_all_same_dtype(false).allow_cpu_scalars(true).add_output(tmp);
    c10::SmallVector<at::Tensor, 4> inputs;
    for (int i = iter.noutputs(); i < iter.ntensors(); ++i) {
      const at::Tensor& in = iter.tensor(i);
      inputs.push_back(iter.is_cpu_scalar(i) ? in : in.to(compute));
    }
    for (const at::Tensor& in : inputs) {
      config.add_const_input(in);
    }
    at::TensorIterator converted = config.build();
    elementwise(op, converted, compute, result, row, params);
    out.copy_(tmp);
    return;
  }
  // CPU scalars in the compute dtype, converted on the host: the Python
  // float in `a * 2.5` arrives as a 0-dim double tensor even for float a.
  std::array<at::Tensor, KernelOperands::kMax> scalars;
  for (int i = iter.noutputs(); i < iter.ntensors(); ++i) {
    if (iter.is_cpu_scalar(i)) {
      scalars[i] = iter.tensor(i).to(compute);
    }
  }
  const int count = iter.ntensors();
  launch(op, iter, [&](const KernelOperands& operands) {
    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
      std::array<char*, KernelOperands::kMax> ptr;
      std::array<int64_t, KernelOperands::kMax> stride;
      for (int k = 0; k < count; ++k) {
        const bool scalar = scalars[k].defined();
        ptr[k] = scalar ? static_cast<char*>(scalars[k].data_ptr())
                        : data[k] + operands.offset[k];
        stride[k] = scalar ? 0 : strides[k];
      }
      row(ptr.data(), stride.data(), n, params);
    });
  });
}

} // namespace ember
// ember-book: end elementwise

// ember-book: begin row_loops
// The rows are the hot code: compiled with -O3 even where the rest of the
// build is not (the book compiles without optimization), so the contiguous
// cases become vector instructions. That needs the element function inlined
// into the loop, which GCC does not do on its own in a build without -O, so
// element functions are marked EMBER_INLINE (and defined in an -O3 block).
#define EMBER_INLINE __attribute__((always_inline))
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

template <typename T>
EMBER_INLINE inline T& element(T* base, int64_t stride_bytes, int64_t i) {
  return *reinterpret_cast<T*>(reinterpret_cast<char*>(base) + i * stride_bytes);
}
template <typename T>
EMBER_INLINE inline const T& element(const T* base, int64_t stride_bytes, int64_t i) {
  return *reinterpret_cast<const T*>(reinterpret_cast<const char*>(base) +
                                     i * stride_bytes);
}

// out = f(in). The first loop is the contiguous case.
template <typename Out, typename In, typename F>
void unaryRow(char* const* data, const int64_t* s, int64_t n, const void* f_) {
  const F& f = *static_cast<const F*>(f_);
  Out* out = reinterpret_cast<Out*>(data[0]);
  const In* in = reinterpret_cast<const In*>(data[1]);
  if (s[0] == sizeof(Out) && s[1] == sizeof(In)) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) element(out, s[0], i) = f(element(in, s[1], i));
  }
}

// out = f(a, b). Contiguous, then "tensor op scalar" (b's stride is 0), then
// any strides (broadcasting shows up as stride 0 too).
template <typename Out, typename In, typename F>
void binaryRow(char* const* data, const int64_t* s, int64_t n, const void* f_) {
  const F& f = *static_cast<const F*>(f_);
  Out* out = reinterpret_cast<Out*>(data[0]);
  const In* a = reinterpret_cast<const In*>(data[1]);
  const In* b = reinterpret_cast<const In*>(data[2]);
  if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == sizeof(In)) {
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b[i]);
  } else if (s[0] == sizeof(Out) && s[1] == sizeof(In) && s[2] == 0) {
    const In b0 = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = f(a[i], b0);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      element(out, s[0], i) = f(element(a, s[1], i), element(b, s[2], i));
    }
  }
}

// The kernels call these: the element types pick the row, f travels as a
// pointer (so a lambda may carry constants such as alpha).
template <typename Out, typename In, typename F>
void unaryLoop(const char* op, at::TensorIteratorBase& iter, const F& f) {
  elementwise(op, iter, c10::CppTypeToScalarType<In>::value,
              c10::CppTypeToScalarType<Out>::value, &unaryRow<Out, In, F>, &f);
}

template <typename Out, typename In, typename F>
void binaryLoop(const char* op, at::TensorIteratorBase& iter, const F& f) {
  elementwise(op, iter, c10::CppTypeToScalarType<In>::value,
              c10::CppTypeToScalarType<Out>::value, &binaryRow<Out, In, F>, &f);
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end row_loops
