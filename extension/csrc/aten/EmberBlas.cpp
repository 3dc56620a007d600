// mm, addmm and bmm on ember: native kernels instead of the CPU fallback.
#include <ATen/Dispatch.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Scalar.h>
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include "aten/EmberBlas.h"
#include "aten/EmberHostKernels.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin blas_ops
namespace ember::blas {

using Named = std::pair<const char*, const at::Tensor*>;

// Every tensor of a call on the first one's ember device, with one dtype.
void checkOperands(const char* op, std::initializer_list<Named> named) {
  // The call reached ember's kernel, so some operand is on ember: compare
  // every operand with the first one that is (a CPU `self` is then named as
  // the odd one out, not compared with itself).
  const auto on_ember =
      std::find_if(named.begin(), named.end(), [](const Named& n) {
        return n.second->is_privateuseone();
      });
  const auto& [first_name, first] =
      on_ember != named.end() ? *on_ember : *named.begin();
  for (const auto& [name, t] : named) {
    // PyTorch's words first, as its generated device checks say them (its
    // tests and its users match on them); which operands, after them.
    TORCH_CHECK(t->is_privateuseone() && t->device() == first->device(),
                "Expected all tensors to be on the same device, but found at "
                "least two devices, ", first->device(), " and ", t->device(),
                "! (ember: ", op, " expects all tensors on one ember device, "
                "got ", first_name, " on ", first->device(), " and ", name,
                " on ", t->device(), ")");
    TORCH_CHECK(t->scalar_type() == first->scalar_type(), "ember: ", op,
                " on ", first->device(), " expects one dtype, got ",
                first_name, " ", first->scalar_type(), " and ", name, " ",
                t->scalar_type());
  }
  // Any dtype: int64 runs chapter 05's loops, the others the host's BLAS,
  // which raises (with the operator and device) for one it lacks.
}

// `dims`: 2 for mm and addmm, 3 for bmm.
void checkShapes(const char* op, const at::Tensor& a, const at::Tensor& b,
                 int64_t dims) {
  TORCH_CHECK(a.dim() == dims && b.dim() == dims, "ember: ", op, " on ",
              a.device(), " expects ", dims, "-D tensors, got ", a.dim(),
              "-D and ", b.dim(), "-D");
  TORCH_CHECK(a.size(-1) == b.size(-2), "ember: ", op, " on ", a.device(),
              ": shapes cannot be multiplied (", a.sizes(), " and ",
              b.sizes(), ")");
}

template <typename T>
Matrix<const T> matrixOf(const at::Tensor& t) {
  const int64_t d = t.dim();
  return {t.const_data_ptr<T>(), d == 3 ? t.stride(0) : 0, t.stride(d - 2),
          t.stride(d - 1)};
}

bool overlaps(const at::Tensor& out, const at::Tensor& t) {
  return at::get_overlap_status(out, t) != at::MemOverlapStatus::No;
}

// out = beta * input + alpha * (a @ b); out has its final shape already.
// The loops write rows of contiguous elements that nothing else reads:
// any other out (a transposed view, out=a) gets a fresh result, copied in.
void matmulInto(const char* op, const at::Tensor& a, const at::Tensor& b,
                const at::Tensor* input, const c10::Scalar& beta,
                const c10::Scalar& alpha, const at::Tensor& out) {
  if (out.numel() == 0) {
    return;
  }
  const bool direct = out.is_contiguous() && !overlaps(out, a) &&
      !overlaps(out, b) &&
      (input == nullptr ||
       at::get_overlap_status(out, *input) == at::MemOverlapStatus::No ||
       at::get_overlap_status(out, *input) == at::MemOverlapStatus::Full);
  const at::Tensor result =
      direct ? out : at::empty(out.sizes(), out.options());
  // beta == 0 means: ignore input entirely, NaN and inf included.
  const bool use_input = input != nullptr && !beta.equal(0);
  const at::Tensor s = use_input ? input->expand(out.sizes()) : at::Tensor();
  const int64_t d = out.dim(), m = out.size(d - 2), n = out.size(d - 1);
  const at::ScalarType dtype = out.scalar_type();
  if (dtype != at::kLong) {
    // Floating point (and complex, int32, ...) goes to the host's BLAS:
    // ATen's CPU matrix products (oneDNN, MKL or OpenBLAS, tuned for this
    // processor), run by chapter 14's host kernel on the device's memory, as
    // a real backend calls its vendor's library. Chapter 05's loops stay the
    // int64 path.
    at::Tensor c = result;
    if (d == 3) {
      at::native::call_fallback_fn<&hostKernel, at::_ops::bmm_out>::call(a, b, c);
    } else if (use_input) {
      at::native::call_fallback_fn<&hostKernel, at::_ops::addmm_out>::call(
          s, a, b, beta, alpha, c);
    } else {
      at::native::call_fallback_fn<&hostKernel, at::_ops::mm_out>::call(a, b, c);
    }
    if (!use_input && !alpha.equal(1)) {
      c.mul_(alpha);
    }
  } else {
    using T = int64_t;
    const Gemm<T> p{
        .batches = d == 3 ? out.size(0) : 1, .m = m, .n = n, .k = a.size(-1),
        .a = matrixOf<T>(a), .b = matrixOf<T>(b),
        .s = use_input ? matrixOf<T>(s) : Matrix<const T>{},
        .c = {result.mutable_data_ptr<T>(), d == 3 ? m * n : 0, n, 1},
        .alpha = alpha.to<T>(), .beta = beta.to<T>()};
    launchRecorded({p.a.data, p.b.data, p.s.data, p.c.data},
                   [p](ptrdiff_t offset) { gemm(atOffset(p, offset)); });
  }
  if (!direct) {
    out.copy_(result);
  }
}

at::Tensor& mm_out(const at::Tensor& self, const at::Tensor& mat2,
                   at::Tensor& out) {
  checkOperands("aten::mm.out",
                {{"self", &self}, {"mat2", &mat2}, {"out", &out}});
  checkShapes("aten::mm.out", self, mat2, 2);
  const c10::DeviceGuard guard(self.device());
  at::native::resize_output(out, {self.size(0), mat2.size(1)});
  matmulInto("aten::mm.out", self, mat2, nullptr, 0, 1, out);
  return out;
}

at::Tensor& bmm_out(const at::Tensor& self, const at::Tensor& mat2,
                    at::Tensor& out) {
  checkOperands("aten::bmm.out",
                {{"self", &self}, {"mat2", &mat2}, {"out", &out}});
  checkShapes("aten::bmm.out", self, mat2, 3);
  TORCH_CHECK(self.size(0) == mat2.size(0), "ember: aten::bmm.out on ",
              self.device(), " expects equal batch sizes, got ",
              self.sizes(), " and ", mat2.sizes());
  const c10::DeviceGuard guard(self.device());
  at::native::resize_output(out, {self.size(0), self.size(1), mat2.size(2)});
  matmulInto("aten::bmm.out", self, mat2, nullptr, 0, 1, out);
  return out;
}

// addmm(input, mat1, mat2): input broadcasts to the product's shape (a
// bias row, a column, a scalar), as it does on the CPU.
at::Tensor& addmm_out(const at::Tensor& input, const at::Tensor& mat1,
                      const at::Tensor& mat2, const c10::Scalar& beta,
                      const c10::Scalar& alpha, at::Tensor& out) {
  constexpr const char* op = "aten::addmm.out";
  checkOperands(op, {{"mat1", &mat1}, {"mat2", &mat2}, {"self", &input},
                    {"out", &out}});
  checkShapes(op, mat1, mat2, 2);
  const std::vector<int64_t> shape = {mat1.size(0), mat2.size(1)};
  bool broadcasts = input.dim() <= 2;
  for (int64_t i = 1; broadcasts && i <= input.dim(); ++i) {
    const int64_t size = input.size(-i);
    broadcasts = size == 1 || size == shape[2 - i];
  }
  TORCH_CHECK(broadcasts, "ember: ", op, " on ", mat1.device(), ": input of "
              "shape ", input.sizes(), " cannot be broadcast to ",
              c10::IntArrayRef(shape));
  const c10::DeviceGuard guard(mat1.device());
  at::native::resize_output(out, shape);
  matmulInto(op, mat1, mat2, &input, beta, alpha, out);
  return out;
}

// The functional and in-place forms (mm, addmm, addmm_, bmm) keep their
// default kernels: they run the meta function, allocate, and call these.
// addr (beta * self + alpha * the outer product of two vectors) is the CPU's
// kernel on the device's memory: its default kernel composes outer, mul and
// add, and rounds each step to bfloat16 where the CPU computes in float.
// addr.out and addr_ call addr.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("bmm.out", TORCH_FN(bmm_out));
  m.impl("addr", torch::CppFunction::makeFromBoxedFunction<&hostKernel>());
}

} // namespace ember::blas
// ember-book: end blas_ops
