// Running ATen's TensorIterator loops as ember kernels: the elementwise loops
// the STUB kernels are written with (their launch is in EmberLoops.cpp), and
// the RAII slot registration for a DispatchStub's PrivateUse1 entry.
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
#include <cstddef>
#include <type_traits>

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

// A row of an elementwise loop: n elements, operand k at data[k] with byte
// stride strides[k], every pointer ready to use. params: the op's constants.
using RowLoop = void (*)(char* const* data, const int64_t* strides, int64_t n,
                         const void* params);

// Runs row over every element of iter (one output, any number of inputs) in
// one launch on the device (EmberLoops.cpp: compiled once, not in every file
// of kernels). params: the op's constants, params_size bytes of them, which a
// graph copies when it records the launch (chapter 15b).
void elementwise(const char* op, at::TensorIteratorBase& iter,
                 at::ScalarType compute, at::ScalarType result, RowLoop row,
                 const void* params, size_t params_size);

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
// pointer and a size (so a lambda may carry constants such as alpha; a
// trivially copyable one, whose bytes are all a copy of it needs).
template <typename Out, typename In, typename F>
void unaryLoop(const char* op, at::TensorIteratorBase& iter, const F& f) {
  static_assert(std::is_trivially_copyable_v<F>, "a graph copies f's bytes");
  elementwise(op, iter, c10::CppTypeToScalarType<In>::value,
              c10::CppTypeToScalarType<Out>::value, &unaryRow<Out, In, F>, &f,
              sizeof(F));
}

template <typename Out, typename In, typename F>
void binaryLoop(const char* op, at::TensorIteratorBase& iter, const F& f) {
  static_assert(std::is_trivially_copyable_v<F>, "a graph copies f's bytes");
  elementwise(op, iter, c10::CppTypeToScalarType<In>::value,
              c10::CppTypeToScalarType<Out>::value, &binaryRow<Out, In, F>, &f,
              sizeof(F));
}

} // namespace ember
#pragma GCC pop_options
// ember-book: end row_loops
