// The stub_kernels chapter's exercise solutions (book.build("exercise_...") compiles them;
// the package does not). They use the chapter's helpers: launch,
// KernelOperands, binaryLoop, structuredOut, PrivateUse1StubSlot.
#include <ATen/core/Tensor.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "aten/EmberLoops.h"
#include "aten/EmberStructured.h"

// ember-book: begin exercise_naive_abs
namespace ember_exercise {

// The abs kernel of many tutorials: the tensors seen as numel() floats, one
// after the other, from their data pointers.
void naiveAbsKernel(at::TensorIteratorBase& iter) {
  ember::launch("aten::abs.out", iter, [&](const ember::KernelOperands& ops) {
    char* data[] = {static_cast<char*>(iter.data_ptr(0)),
                    static_cast<char*>(iter.data_ptr(1))};
    float* out = ops.at<float>(data, 0);
    const float* in = ops.at<float>(data, 1);
    for (int64_t i = 0; i < iter.numel(); ++i) {
      out[i] = std::fabs(in[i]);
    }
  });
}

// Constructed after the chapter's own registration, so it takes the slot;
// destroyed first, when this build is retired.
static const ember::PrivateUse1StubSlot<decltype(at::native::abs_stub)>
    naive_abs_slot(at::native::abs_stub, &naiveAbsKernel);

} // namespace ember_exercise
// ember-book: end exercise_naive_abs

// ember-book: begin exercise_maximum
#include <ATen/ops/maximum_native.h>

namespace ember_exercise {

void maximumKernel(at::TensorIteratorBase& iter) {
  ember::dispatchNumbers("aten::maximum.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    ember::binaryLoop<T, T>("aten::maximum.out", iter, [](T a, T b) EMBER_INLINE {
      if constexpr (std::is_floating_point_v<T>) {
        if (a != a || b != b) { // torch.maximum propagates NaN from either side
          return std::numeric_limits<T>::quiet_NaN();
        }
      }
      return a > b ? a : b;
    });
  });
}

at::Tensor& maximum_out(const at::Tensor& self, const at::Tensor& other,
                        at::Tensor& out) {
  return ember::structuredOut<at::native::structured_maximum_out>(out, self,
                                                                   other);
}

} // namespace ember_exercise

EMBER_REGISTER_STUB(maximum_stub, &ember_exercise::maximumKernel);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("maximum.out", &ember_exercise::maximum_out);
}
// ember-book: end exercise_maximum

// ember-book: begin exercise_abs_out_alone
namespace ember_exercise {

// abs.out routed to ATen's implementation, with no abs_stub kernel in this
// build.
at::Tensor& absOutAlone(const at::Tensor& self, at::Tensor& out) {
  return at::native::abs_out(self, out);
}

} // namespace ember_exercise

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("abs.out", &ember_exercise::absOutAlone);
}
// ember-book: end exercise_abs_out_alone
