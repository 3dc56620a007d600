// Earlier versions of parts that chapter 04 shows and a later cell revises.
// Not part of the torch_ember package (extension/csrc holds the latest
// versions); the chapter's builds compile them. See book/sync.py.
#include <ATen/core/Tensor.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <optional>

// ember-book: begin convolution.v1
namespace ember::conv {

// The registration found in many out-of-tree backends: a kernel for conv2d,
// the operator the model calls. It computes the right numbers.
at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight,
                  const std::optional<at::Tensor>& bias,
                  c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
                  c10::SymIntArrayRef dilation, c10::SymInt groups) {
  constexpr const char* op = "aten::conv2d";
  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
                          groups.expect_int());
  return forward(op, input, weight, bias, s);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("conv2d", TORCH_FN(conv2d));
}

} // namespace ember::conv
// ember-book: end convolution.v1

// ember-book: begin fill_where.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// fill_ and where only move elements, never compute with them: their loops
// need the element's size, not its dtype, and four copies cover every dtype
// up to 8 bytes.
template <typename Bits>
void fillLoop(at::TensorIterator& iter, Bits bits) {
  launch("aten::fill_", iter, [&](const KernelOperands& operands) {
    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
      Bits* out = operands.at<Bits>(data, 0);
      if (strides[0] == sizeof(Bits)) {
        for (int64_t i = 0; i < n; ++i) out[i] = bits;
      } else {
        for (int64_t i = 0; i < n; ++i) element(out, strides[0], i) = bits;
      }
    });
  });
}

template <typename Bits>
Bits bitsOf(const at::Tensor& host_value) {
  Bits bits;
  std::memcpy(&bits, host_value.const_data_ptr(), sizeof(Bits));
  return bits;
}

void fillKernel(at::TensorIterator& iter, const at::Scalar& value) {
  if (iter.numel() == 0) {
    return;
  }
  // The value in the tensor's dtype, converted on the host by ATen's CPU
  // fill_, which also refuses values the dtype cannot hold.
  const at::Tensor host =
      at::empty({}, at::TensorOptions().dtype(iter.dtype(0))).fill_(value);
  switch (host.itemsize()) {
    case 1: return fillLoop(iter, bitsOf<uint8_t>(host));
    case 2: return fillLoop(iter, bitsOf<uint16_t>(host));
    case 4: return fillLoop(iter, bitsOf<uint32_t>(host));
    case 8: return fillLoop(iter, bitsOf<uint64_t>(host));
    default:
      TORCH_CHECK(false, "ember: aten::fill_ has no ember kernel for ",
                  iter.dtype(0), " tensors on ", c10::get_privateuse1_backend());
  }
}

// out = condition ? self : other, elementwise. ATen's where_self_out has
// already converted self and other to the result dtype.
template <typename Bits>
void whereLoop(at::TensorIterator& iter) {
  launch("aten::where.self_out", iter, [&](const KernelOperands& operands) {
    iter.for_each([&](char** data, const int64_t* s, int64_t n) {
      Bits* out = operands.at<Bits>(data, 0);
      const bool* c = operands.at<bool>(data, 1);
      const Bits* a = operands.at<Bits>(data, 2);
      const Bits* b = operands.at<Bits>(data, 3);
      if (s[0] == sizeof(Bits) && s[1] == 1 && s[2] == sizeof(Bits) &&
          s[3] == sizeof(Bits)) {
        for (int64_t i = 0; i < n; ++i) out[i] = c[i] ? a[i] : b[i];
      } else {
        for (int64_t i = 0; i < n; ++i) {
          element(out, s[0], i) =
              element(c, s[1], i) ? element(a, s[2], i) : element(b, s[3], i);
        }
      }
    });
  });
}

void whereKernel(at::TensorIterator& iter) {
  if (iter.numel() == 0) {
    return;
  }
  switch (iter.element_size(0)) {
    case 1: return whereLoop<uint8_t>(iter);
    case 2: return whereLoop<uint16_t>(iter);
    case 4: return whereLoop<uint32_t>(iter);
    case 8: return whereLoop<uint64_t>(iter);
    default:
      TORCH_CHECK(false, "ember: aten::where has no ember kernel for ",
                  iter.dtype(0), " tensors on ", c10::get_privateuse1_backend());
  }
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(fill_stub, &ember::fillKernel);
EMBER_REGISTER_STUB(where_kernel, &ember::whereKernel);

namespace ember {

// None of these is structured; ATen's device-generic implementations build
// the TensorIterator and call the stubs above. fill_ and where have CPU and
// CUDA kernels only, so every overload that should run here is registered,
// zero_ (fill_ with 0) included.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", static_cast<at::Tensor& (*)(
                             at::Tensor&, const at::Scalar&)>(&at::native::fill_));
  m.impl("fill_.Tensor", static_cast<at::Tensor& (*)(
                             at::Tensor&, const at::Tensor&)>(&at::native::fill_));
  m.impl("zero_", &at::native::zero_);
  m.impl("where.self_out", &at::native::where_self_out);
  m.impl("where.self", static_cast<at::Tensor (*)(
                           const at::Tensor&, const at::Tensor&,
                           const at::Tensor&)>(&at::native::where));
}

} // namespace ember
// ember-book: end fill_where.v1

// ember-book: begin blas_ops.v1
namespace ember::blas {

using Named = std::pair<const char*, const at::Tensor*>;

// Every tensor of a call on the first one's ember device, with its dtype,
// which must be one the loops are compiled for.
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
    TORCH_CHECK(t->is_privateuseone() && t->device() == first->device(),
                "ember: ", op, " expects all tensors on one ember device, "
                "got ", first_name, " on ", first->device(), " and ", name,
                " on ", t->device());
    TORCH_CHECK(t->scalar_type() == first->scalar_type(), "ember: ", op,
                " on ", first->device(), " expects one dtype, got ",
                first_name, " ", first->scalar_type(), " and ", name, " ",
                t->scalar_type());
  }
  const at::ScalarType dtype = first->scalar_type();
  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kLong,
              "ember: ", op, " on ", first->device(), " supports float32, "
              "float64 and int64 tensors, got ", dtype);
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
void matmulInto(const at::Tensor& a, const at::Tensor& b,
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
  AT_DISPATCH_FLOATING_TYPES_AND(at::kLong, dtype, "ember_gemm", [&] {
    using T = scalar_t;
    const Gemm<T> p{
        .batches = d == 3 ? out.size(0) : 1, .m = m, .n = n, .k = a.size(-1),
        .a = matrixOf<T>(a), .b = matrixOf<T>(b),
        .s = use_input ? matrixOf<T>(s) : Matrix<const T>{},
        .c = {result.mutable_data_ptr<T>(), d == 3 ? m * n : 0, n, 1},
        .alpha = alpha.to<T>(), .beta = beta.to<T>()};
    launch({p.a.data, p.b.data, p.s.data, p.c.data},
           [&](ptrdiff_t offset) { gemm(onDevice(p, offset)); });
  });
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
  matmulInto(self, mat2, nullptr, 0, 1, out);
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
  matmulInto(self, mat2, nullptr, 0, 1, out);
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
  matmulInto(mat1, mat2, &input, beta, alpha, out);
  return out;
}

// The functional and in-place forms (mm, addmm, addmm_, bmm) keep their
// default kernels: they run the meta function, allocate, and call these.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mm.out", TORCH_FN(mm_out));
  m.impl("addmm.out", TORCH_FN(addmm_out));
  m.impl("bmm.out", TORCH_FN(bmm_out));
}

} // namespace ember::blas
// ember-book: end blas_ops.v1

// ember-book: begin binary_ops.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// add_stub computes self + alpha * other; sub reaches it too, with -alpha.
void addKernel(at::TensorIteratorBase& iter, const at::Scalar& alpha) {
  dispatchNumbersAndBool("aten::add.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T a = alpha.to<T>();
    if (a == T(1)) { // the common case, one multiplication less
      binaryLoop<T, T>("aten::add.out", iter,
                       [](T x, T y) EMBER_INLINE { return T(x + y); });
    } else {
      binaryLoop<T, T>("aten::add.out", iter,
                       [a](T x, T y) EMBER_INLINE { return T(x + a * y); });
    }
  });
}

void mulKernel(at::TensorIteratorBase& iter) {
  dispatchNumbersAndBool("aten::mul.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>("aten::mul.out", iter,
                     [](T x, T y) EMBER_INLINE { return T(x * y); });
  });
}

// True division: ATen promotes integer inputs to float before we see them.
void divKernel(at::TensorIteratorBase& iter) {
  dispatchFloating("aten::div.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    binaryLoop<T, T>("aten::div.out", iter,
                     [](T x, T y) EMBER_INLINE { return T(x / y); });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(add_stub, &ember::addKernel);
EMBER_REGISTER_STUB(mul_stub, &ember::mulKernel);
EMBER_REGISTER_STUB(div_true_stub, &ember::divKernel);

namespace ember {

using at::Scalar;
using at::Tensor;

// add's structured class is generated from a "ufunc" description; its
// CPU-named class is the device-generic entry, which calls
// add_stub(device_type(), ...). sub, mul and div are ordinary structured ops.
Tensor& add_out(const Tensor& self, const Tensor& other, const Scalar& alpha,
                Tensor& out) {
  return structuredOut<at::native::structured_ufunc_add_CPU>(out, self, other,
                                                             alpha);
}
Tensor& sub_out(const Tensor& self, const Tensor& other, const Scalar& alpha,
                Tensor& out) {
  return structuredOut<at::native::structured_sub_out>(out, self, other, alpha);
}
Tensor& mul_out(const Tensor& self, const Tensor& other, Tensor& out) {
  return structuredOut<at::native::structured_mul_out>(out, self, other);
}
Tensor& div_out(const Tensor& self, const Tensor& other, Tensor& out) {
  return structuredOut<at::native::structured_div_out>(out, self, other);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.out", &add_out);
  m.impl("sub.out", &sub_out);
  m.impl("mul.out", &mul_out);
  m.impl("div.out", &div_out);
}

} // namespace ember
// ember-book: end binary_ops.v1

// ember-book: begin comparison_ops.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// The result is bool; the inputs arrive in their common dtype, which may be
// bool too (mask == mask).
template <typename Compare>
void compareKernel(const char* op, at::TensorIteratorBase& iter, Compare compare) {
  dispatchNumbersAndBool(op, iter.common_dtype(), [&](auto zero) {
    binaryLoop<bool, decltype(zero)>(op, iter, compare);
  });
}

#define EMBER_COMPARE_KERNEL(name, expression)                          \
  void name##Kernel(at::TensorIteratorBase& iter) {                     \
    compareKernel("aten::" #name, iter,                                 \
                  [](auto x, auto y) EMBER_INLINE { return expression; }); \
  }
EMBER_COMPARE_KERNEL(eq, x == y)
EMBER_COMPARE_KERNEL(ne, x != y)
EMBER_COMPARE_KERNEL(lt, x < y)
EMBER_COMPARE_KERNEL(le, x <= y)
EMBER_COMPARE_KERNEL(gt, x > y)
EMBER_COMPARE_KERNEL(ge, x >= y)
#undef EMBER_COMPARE_KERNEL

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(eq_stub, &ember::eqKernel);
EMBER_REGISTER_STUB(ne_stub, &ember::neKernel);
EMBER_REGISTER_STUB(lt_stub, &ember::ltKernel);
EMBER_REGISTER_STUB(le_stub, &ember::leKernel);
EMBER_REGISTER_STUB(gt_stub, &ember::gtKernel);
EMBER_REGISTER_STUB(ge_stub, &ember::geKernel);

namespace ember {

// Each comparison has a Tensor and a Scalar overload, both structured, both
// ending in the same stub (the scalar becomes a CPU scalar operand).
#define EMBER_COMPARE_OUT(name)                                              \
  at::Tensor& name##_tensor_out(const at::Tensor& self,                      \
                                const at::Tensor& other, at::Tensor& out) {  \
    return structuredOut<at::native::structured_##name##_Tensor_out>(        \
        out, self, other);                                                   \
  }                                                                          \
  at::Tensor& name##_scalar_out(const at::Tensor& self,                      \
                                const at::Scalar& other, at::Tensor& out) {  \
    return structuredOut<at::native::structured_##name##_Scalar_out>(        \
        out, self, other);                                                   \
  }
EMBER_COMPARE_OUT(eq)
EMBER_COMPARE_OUT(ne)
EMBER_COMPARE_OUT(lt)
EMBER_COMPARE_OUT(le)
EMBER_COMPARE_OUT(gt)
EMBER_COMPARE_OUT(ge)
#undef EMBER_COMPARE_OUT

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("eq.Tensor_out", &eq_tensor_out);
  m.impl("eq.Scalar_out", &eq_scalar_out);
  m.impl("ne.Tensor_out", &ne_tensor_out);
  m.impl("ne.Scalar_out", &ne_scalar_out);
  m.impl("lt.Tensor_out", &lt_tensor_out);
  m.impl("lt.Scalar_out", &lt_scalar_out);
  m.impl("le.Tensor_out", &le_tensor_out);
  m.impl("le.Scalar_out", &le_scalar_out);
  m.impl("gt.Tensor_out", &gt_tensor_out);
  m.impl("gt.Scalar_out", &gt_scalar_out);
  m.impl("ge.Tensor_out", &ge_tensor_out);
  m.impl("ge.Scalar_out", &ge_scalar_out);
}

} // namespace ember
// ember-book: end comparison_ops.v1

// ember-book: begin unary_ops.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// Float ops: ATen promotes integer inputs to the default float dtype.
#define EMBER_FLOAT_UNARY(name, expression)                                 \
  void name##Kernel(at::TensorIteratorBase& iter) {                         \
    dispatchFloating("aten::" #name ".out", iter.common_dtype(),            \
                     [&](auto zero) {                                       \
      using T = decltype(zero);                                             \
      unaryLoop<T, T>("aten::" #name ".out", iter,                          \
                      [](T x) EMBER_INLINE { return T(expression); });      \
    });                                                                     \
  }

EMBER_FLOAT_UNARY(exp, std::exp(x))
EMBER_FLOAT_UNARY(log, std::log(x))
EMBER_FLOAT_UNARY(sqrt, std::sqrt(x))
EMBER_FLOAT_UNARY(rsqrt, T(1) / std::sqrt(x))
EMBER_FLOAT_UNARY(sin, std::sin(x))
EMBER_FLOAT_UNARY(cos, std::cos(x))
EMBER_FLOAT_UNARY(tanh, std::tanh(x))
EMBER_FLOAT_UNARY(sigmoid, T(1) / (T(1) + std::exp(-x)))
#undef EMBER_FLOAT_UNARY

void negKernel(at::TensorIteratorBase& iter) {
  dispatchNumbers("aten::neg.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    unaryLoop<T, T>("aten::neg.out", iter, [](T x) EMBER_INLINE { return T(-x); });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(exp_stub, &ember::expKernel);
EMBER_REGISTER_STUB(log_stub, &ember::logKernel);
EMBER_REGISTER_STUB(sqrt_stub, &ember::sqrtKernel);
EMBER_REGISTER_STUB(rsqrt_stub, &ember::rsqrtKernel);
EMBER_REGISTER_STUB(sin_stub, &ember::sinKernel);
EMBER_REGISTER_STUB(cos_stub, &ember::cosKernel);
EMBER_REGISTER_STUB(tanh_stub, &ember::tanhKernel);
EMBER_REGISTER_STUB(sigmoid_stub, &ember::sigmoidKernel);
EMBER_REGISTER_STUB(neg_stub, &ember::negKernel);

namespace ember {

// These operators are structured: ATen's class for the op runs meta() and
// impl(); structuredOut supplies the out= tensor (see structured_out).
#define EMBER_UNARY_OUT(name)                                               \
  at::Tensor& name##_out(const at::Tensor& self, at::Tensor& out) {         \
    return structuredOut<at::native::structured_##name##_out>(out, self);   \
  }
EMBER_UNARY_OUT(exp)
EMBER_UNARY_OUT(log)
EMBER_UNARY_OUT(sqrt)
EMBER_UNARY_OUT(rsqrt)
EMBER_UNARY_OUT(sin)
EMBER_UNARY_OUT(cos)
EMBER_UNARY_OUT(tanh)
EMBER_UNARY_OUT(sigmoid)
EMBER_UNARY_OUT(neg)
#undef EMBER_UNARY_OUT

// Only the out= overloads: the functional (exp) and in-place (exp_) forms
// already have a default kernel at PrivateUse1 that calls exp.out.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("exp.out", &exp_out);
  m.impl("log.out", &log_out);
  m.impl("sqrt.out", &sqrt_out);
  m.impl("rsqrt.out", &rsqrt_out);
  m.impl("sin.out", &sin_out);
  m.impl("cos.out", &cos_out);
  m.impl("tanh.out", &tanh_out);
  m.impl("sigmoid.out", &sigmoid_out);
  m.impl("neg.out", &neg_out);
}

} // namespace ember
// ember-book: end unary_ops.v1

// ember-book: begin reductions.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// A reduction's TensorIterator has the output as operand 0 with stride 0
// along every reduced dimension, so "out[i] += in[i]" over the iterator sums
// each group into its output element. Chunks of the same output element must
// not run at once, so the loop is serial. Where the innermost run is reduced
// (output stride 0), it is summed in a wider accumulator first (double for
// float, as ATen's CPU kernels do) and added once.
template <typename T>
void sumLoop(const char* op, at::TensorIterator& iter) {
  using Acc = at::acc_type<T, /*is_cuda=*/false>;
  iter.output(0).fill_(0); // ATen's CPU kernel starts from zero too
  launch(op, iter, [&](const KernelOperands& operands) {
    iter.serial_for_each(
        [&](char** data, const int64_t* strides, int64_t n) {
          T* out = operands.at<T>(data, 0);
          const T* in = operands.at<T>(data, 1);
          if (strides[0] == 0) {
            Acc acc = 0;
            if (strides[1] == sizeof(T)) {
              for (int64_t i = 0; i < n; ++i) acc += in[i];
            } else {
              for (int64_t i = 0; i < n; ++i) acc += element(in, strides[1], i);
            }
            *out = static_cast<T>(*out + acc);
          } else {
            for (int64_t i = 0; i < n; ++i) {
              element(out, strides[0], i) += element(in, strides[1], i);
            }
          }
        },
        {0, iter.numel()});
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

at::Tensor& sum_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                    bool keepdim, std::optional<at::ScalarType> dtype,
                    at::Tensor& out) {
  return structuredOut<at::native::structured_sum_out>(out, self, dim, keepdim,
                                                       dtype);
}

at::Tensor& mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                     bool keepdim, std::optional<at::ScalarType> dtype,
                     at::Tensor& out) {
  return structuredOut<at::native::structured_mean_out>(out, self, dim,
                                                        keepdim, dtype);
}

// sum(), sum(dim) and mean(dim) have default kernels at PrivateUse1 that end
// in these out= overloads.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("sum.IntList_out", &sum_out);
  m.impl("mean.out", &mean_out);
}

} // namespace ember
// ember-book: end reductions.v1

// ember-book: begin convolution.v2
namespace ember::conv {

// conv1d/2d/3d, Conv2d, F.conv2d with padding="same", ... all end in
// aten::convolution, whose autograd kernel records ConvolutionBackward0 and
// whose default kernel (_convolution) checks the arguments, turns 1-D into
// 2-D and, for a device it does not know, calls this operator.
at::Tensor convolution_overrideable(
    const at::Tensor& input, const at::Tensor& weight,
    const std::optional<at::Tensor>& bias, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups) {
  constexpr const char* op = "aten::convolution_overrideable";
  TORCH_CHECK(!transposed, "ember: ", op, " on ", input.device(),
              ": transposed convolutions are not implemented");
  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
                          groups.expect_int());
  return forward(op, input, weight, bias, s);
}

// ConvolutionBackward0 calls aten::convolution_backward, whose default
// kernel calls this one for ember tensors.
std::tuple<at::Tensor, at::Tensor, at::Tensor>
convolution_backward_overrideable(
    const at::Tensor& grad_output, const at::Tensor& input,
    const at::Tensor& weight, c10::SymIntArrayRef stride,
    c10::SymIntArrayRef padding, c10::SymIntArrayRef dilation,
    bool transposed, c10::SymIntArrayRef output_padding, c10::SymInt groups,
    std::array<bool, 3> output_mask) {
  constexpr const char* op = "aten::convolution_backward_overrideable";
  TORCH_CHECK(!transposed, "ember: ", op, " on ", input.device(),
              ": transposed convolutions are not implemented");
  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
                          groups.expect_int());
  return backward(op, grad_output, input, weight, s, output_mask);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution_overrideable));
  m.impl("convolution_backward_overrideable",
         TORCH_FN(convolution_backward_overrideable));
}

} // namespace ember::conv
// ember-book: end convolution.v2

// ember-book: begin relu_ops.v1
#pragma GCC push_options
#pragma GCC optimize("O3")
namespace ember {

// relu(x) is clamp_min(x, 0) in ATen; the stub gets the bound as a Scalar.
void clampMinKernel(at::TensorIteratorBase& iter, at::Scalar min) {
  dispatchNumbers("aten::clamp_min.out", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T bound = min.to<T>();
    // NaN < bound is false, so NaN stays NaN, as on the CPU.
    unaryLoop<T, T>("aten::clamp_min.out", iter,
                    [bound](T x) EMBER_INLINE { return x < bound ? bound : x; });
  });
}

// relu's gradient: threshold_backward(grad, x, 0) is grad where x > 0, else 0.
// The stub computes out = x <= threshold ? value : other.
void thresholdKernel(at::TensorIteratorBase& iter, const at::Scalar& threshold,
                     const at::Scalar& value) {
  dispatchNumbers("aten::threshold_backward", iter.common_dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T t = threshold.to<T>(), v = value.to<T>();
    binaryLoop<T, T>("aten::threshold_backward", iter,
                     [t, v](T x, T other) EMBER_INLINE { return x <= t ? v : other; });
  });
}

} // namespace ember
#pragma GCC pop_options

EMBER_REGISTER_STUB(clamp_min_scalar_stub, &ember::clampMinKernel);
EMBER_REGISTER_STUB(threshold_stub, &ember::thresholdKernel);

namespace ember {

at::Tensor& clamp_min_out(const at::Tensor& self, const at::Scalar& min,
                          at::Tensor& out) {
  return structuredOut<at::native::structured_clamp_min_out>(out, self, min);
}

at::Tensor& threshold_backward_out(const at::Tensor& grad,
                                   const at::Tensor& self,
                                   const at::Scalar& threshold,
                                   at::Tensor& grad_input) {
  return structuredOut<at::native::structured_threshold_backward_out>(
      grad_input, grad, self, threshold);
}

// relu and relu_ have CPU and CUDA kernels only: ATen's relu (clamp_min with
// 0) is device-generic, so ember registers it as its own.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clamp_min.out", &clamp_min_out);
  m.impl("threshold_backward.grad_input", &threshold_backward_out);
  m.impl("relu", &at::native::relu);
  m.impl("relu_", &at::native::relu_);
}

} // namespace ember
// ember-book: end relu_ops.v1

// ember-book: begin abs_out.v1
namespace ember {

// abs.out has kernels for CPU and CUDA only; ATen's implementation of it is
// device-generic and calls abs_stub(iter.device_type(), iter).
at::Tensor& abs_out(const at::Tensor& self, at::Tensor& out) {
  return at::native::abs_out(self, out);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("abs.out", &abs_out);
}

} // namespace ember
// ember-book: end abs_out.v1
