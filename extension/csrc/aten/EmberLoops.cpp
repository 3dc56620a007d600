// elementwise (EmberLoops.h): the one launch of every loop the STUB kernels
// run, compiled here once rather than in each file of kernels.
#include <ATen/native/TensorIterator.h>
#include <ATen/ops/empty.h>
#include <c10/util/SmallVector.h>

#include <array>
#include <cstddef>
#include <memory>
#include <vector>

#include "aten/EmberLaunch.h"
#include "aten/EmberLoops.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin elementwise
namespace ember {

// Outside the CPU, TensorIterator computes the common dtype and checks the
// promotion, but leaves converting to the kernel: an int tensor added to a
// float tensor arrives as is, and so does an out= tensor of another dtype.
static bool needsCasts(const at::TensorIteratorBase& iter,
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

// The op's constants (a trivially copyable lambda) as a kernel body holds
// them: in place eagerly, a copy of the bytes once a graph records the body.
struct OwnedParams {
  OwnedParams(const void* p, size_t n) : ptr(p), size(n) {}
  OwnedParams(const OwnedParams& other)
      : bytes(std::make_shared<std::vector<char>>(
            static_cast<const char*>(other.ptr),
            static_cast<const char*>(other.ptr) + other.size)),
        ptr(bytes->data()), size(other.size) {}
  OwnedParams& operator=(const OwnedParams&) = delete;
  const void* get() const { return ptr; }

 private:
  std::shared_ptr<std::vector<char>> bytes;
  const void* ptr;
  size_t size;
};

// Each call of the for_each body gets a run of elements (a chunk of one row:
// for_each splits the work among threads).
void elementwise(const char* op, at::TensorIteratorBase& iter,
                 at::ScalarType compute, at::ScalarType result, RowLoop row,
                 const void* params, size_t params_size) {
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
    elementwise(op, converted, compute, result, row, params, params_size);
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
  // By value: a graph replays a copy of this body (EmberRecordedLaunch.h).
  // params point at the op's constants, copied into the body as bytes only
  // when a graph records it (no copy, no allocation eagerly).
  launchRecorded(
      op, iter,
      [row, count, scalars = std::move(scalars),
       constants = OwnedParams(params, params_size)](
          at::TensorIteratorBase& it, const KernelOperands& operands) {
    const void* params = constants.get();
    it.for_each([&](char** data, const int64_t* strides, int64_t n) {
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
