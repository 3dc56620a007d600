// Factory kernels: where every ember tensor comes from.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <optional>

// ember-book: begin empty_memory_format
namespace ember {

// A layout as Python spells it (torch.sparse_coo), the way the user wrote
// it; c10's operator<< prints the enum name (Sparse).
const char* layoutName(c10::Layout layout) {
  switch (layout) {
    case c10::Layout::Strided: return "torch.strided";
    case c10::Layout::Sparse: return "torch.sparse_coo";
    case c10::Layout::SparseCsr: return "torch.sparse_csr";
    case c10::Layout::SparseCsc: return "torch.sparse_csc";
    case c10::Layout::SparseBsr: return "torch.sparse_bsr";
    case c10::Layout::SparseBsc: return "torch.sparse_bsc";
    case c10::Layout::Mkldnn: return "torch._mkldnn";
    case c10::Layout::Jagged: return "torch.jagged";
    default: return "an unknown layout";
  }
}

void checkStridedLayout(const char* op, std::optional<c10::Layout> layout) {
  const c10::Layout requested = c10::layout_or_default(layout);
  TORCH_CHECK(requested == c10::Layout::Strided, "ember: ", op,
              " does not support layout=", layoutName(requested),
              ": ember tensors are strided (dense) only");
}

// What every ember factory refuses, with the op's name in the message.
void checkFactoryArguments(const char* op, c10::IntArrayRef size,
                           std::optional<c10::Layout> layout,
                           std::optional<bool> pin_memory) {
  checkStridedLayout(op, layout);
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "ember: ", op,
              " does not support pin_memory=True: pinned memory is host memory "
              "(page-locked for fast transfers), and this tensor would live "
              "in ember device memory");
  for (const int64_t dim : size) {
    TORCH_CHECK(dim >= 0, "ember: ", op, " got the negative size ", dim,
                " in ", size, ": every dimension must be >= 0");
  }
}

// Sizes arrive as SymInt[], the schema's type and the one ATen's own kernels
// take, so the dispatcher sees one C++ signature per operator. Symbolic sizes
// exist only while torch.compile traces; memory needs concrete ones, and
// C10_AS_INTARRAYREF_SLOW throws for a symbolic size.
at::Tensor empty_memory_format(
    c10::SymIntArrayRef sym_size, std::optional<c10::ScalarType> dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  checkFactoryArguments("aten::empty.memory_format", size, layout, pin_memory);
  // Allocate on the requested ember device ("privateuseone:1"); with no
  // index, on the current one. The guard restores the current device after.
  const c10::DeviceGuard guard(c10::device_or_default(device));
  // ATen's generic path: contiguous (or channels-last) strides, a Storage
  // from our allocator, a TensorImpl whose dispatch keys say PrivateUse1.
  return at::detail::empty_generic(
      size, c10::GetAllocator(c10::DeviceType::PrivateUse1),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype), memory_format);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format));
}

} // namespace ember
// ember-book: end empty_memory_format

// ember-book: begin empty_strided
namespace ember {

at::Tensor empty_strided(
    c10::SymIntArrayRef sym_size, c10::SymIntArrayRef sym_stride,
    std::optional<c10::ScalarType> dtype, std::optional<c10::Layout> layout,
    std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  const c10::IntArrayRef stride = C10_AS_INTARRAYREF_SLOW(sym_stride);
  checkFactoryArguments("aten::empty_strided", size, layout, pin_memory);
  const c10::DeviceGuard guard(c10::device_or_default(device));
  // The storage holds exactly the bytes the strides can reach.
  return at::detail::empty_strided_generic(
      size, stride, c10::GetAllocator(c10::DeviceType::PrivateUse1),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
      c10::dtype_or_default(dtype));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty_strided", TORCH_FN(empty_strided));
}

} // namespace ember
// ember-book: end empty_strided

// ember-book: begin sparse_factories
// Chapter minimal_ops refused sparse layouts here, at the sparse keys'
// empty.memory_format. The layouts chapter fills those keys (csrc/sparse/:
// PyTorch's empty_sparse and empty_sparse_compressed, in a device guard), so
// the refusal is gone: a key holds one kernel per operator.
// ember-book: end sparse_factories
