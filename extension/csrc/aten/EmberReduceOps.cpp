// Reductions through their stubs: sum and mean.
#include <ATen/AccumulateType.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <vector>

#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"
#include "aten/EmberHostKernels.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin reductions
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// A reduction's TensorIterator has the output as operand 0 with stride 0
// along every reduced dimension, so "out[i] += in[i]" over the iterator sums
// each group into its output element. Adding into the output itself would
// round the partial sum to T at every pass over an outer reduced dimension
// (summing dims 0 and 2 of a (7, 10, 5) float tensor rounds each result 7
// times). So each output element accumulates in a slot of a wider type
// (double for float, as in ATen's CPU kernels), in the kernel's own host
// memory, and the output receives the slot rounded once per pass: the last
// pass leaves the whole group's sum, rounded once. Passes over one output
// element must not run at once, so the loop is serial.
template <typename T>
void sumLoop(const char* op, at::TensorIterator& iter) {
  using Acc = at::acc_type<T, /*is_cuda=*/false>;
  // A slot per element offset from the output's first element (its strides
  // are not negative; 0 along the reduced dimensions).
  const at::Tensor& result = iter.output(0);
  int64_t span = 1;
  for (int64_t d = 0; d < result.dim(); ++d) {
    span += (result.size(d) - 1) * result.stride(d);
  }
  launchRecorded(op, iter, [span](at::TensorIteratorBase& it,
                                  const KernelOperands& operands) {
    // Made in the body: each replay of a graph sums from zero.
    std::vector<Acc> slots(span, Acc(0));
    const char* first = static_cast<const char*>(it.data_ptr(0));
    it.serial_for_each(
        [&](char** data, const int64_t* strides, int64_t n) {
          T* out = operands.at<T>(data, 0);
          const T* in = operands.at<T>(data, 1);
          Acc* slot = slots.data() + (data[0] - first) / int64_t{sizeof(T)};
          if (strides[0] == 0) { // the innermost run is reduced: one group
            Acc acc = 0;
            if (strides[1] == sizeof(T)) {
              for (int64_t i = 0; i < n; ++i) acc += in[i];
            } else {
              for (int64_t i = 0; i < n; ++i) acc += element(in, strides[1], i);
            }
            *slot += acc;
            *out = static_cast<T>(*slot);
          } else { // n outputs, one element each
            const int64_t step = strides[0] / int64_t{sizeof(T)};
            for (int64_t i = 0; i < n; ++i) {
              slot[i * step] += static_cast<Acc>(element(in, strides[1], i));
              element(out, strides[0], i) = static_cast<T>(slot[i * step]);
            }
          }
        },
        {0, it.numel()});
  });
}

// make_reduction has already converted the input to the result's dtype.
void sumKernel(at::TensorIterator& iter) {
  dispatchNumbers("aten::sum.IntList_out", iter.dtype(0), [&](auto zero) {
    sumLoop<decltype(zero)>("aten::sum.IntList_out", iter);
  });
}

// mean = sum * (outputs / inputs), like ATen's own mean kernels.
void meanKernel(at::TensorIterator& iter) {
  dispatchFloating("aten::mean.out", iter.dtype(0), [&](auto zero) {
    sumLoop<decltype(zero)>("aten::mean.out", iter);
  });
  const double factor = static_cast<double>(iter.num_output_elements()) /
                        static_cast<double>(iter.numel());
  iter.output(0).mul_(factor); // ember's mul, one more launch
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(sum_stub, &ember::sumKernel);
EMBER_REGISTER_STUB(mean_stub, &ember::meanKernel);

namespace ember {

// Chapter 14's host kernel (EmberHostKernel.cpp) computes the dtypes the
// loops lack (float16, bfloat16, complex, int32, ...) with the CPU's kernels
// on the device's memory; meta() checks the arguments and sizes out first.
// float16 and bfloat16 sums accumulate in float32 there, as on the CPU.
at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                    bool keepdim, std::optional<at::ScalarType> dtype,
                    at::Tensor& out) {
  using Native = at::native::structured_sum_out;
  if (loopsCompute({out, self})) {
    return structuredOut<Native>(out, self, dim, keepdim, dtype);
  }
  StructuredOut<Native>(out).meta(self, dim, keepdim, dtype);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::sum_IntList_out>::call(
      self, dim, keepdim, dtype, out);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                     bool keepdim, std::optional<at::ScalarType> dtype,
                     at::Tensor& out) {
  using Native = at::native::structured_mean_out;
  if (loopsCompute({out, self})) {
    return structuredOut<Native>(out, self, dim, keepdim, dtype);
  }
  StructuredOut<Native>(out).meta(self, dim, keepdim, dtype);
  return at::native::call_fallback_fn<&hostKernel, at::_ops::mean_out>::call(
      self, dim, keepdim, dtype, out);
}

// sum(), sum(dim) and mean(dim) have default kernels at PrivateUse1 that end
// in these out= overloads.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.IntList_out", &sum_out);
  m.impl("mean.out", &mean_out);
}

} // namespace ember
// ember-book: end reductions
