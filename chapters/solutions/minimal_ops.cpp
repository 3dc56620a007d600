// The minimal_ops chapter's exercise parts (shown by its %%cpp exercise_* cells).
// Not part of the torch_ember package: the chapter's builds compile them.
// exercise_wrong_dtype is a mistake on purpose (the chapter shows how the
// dispatcher refuses it); exercise_fill uses the chapter's kernels, so it is
// built after them.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"

// ember-book: begin exercise_wrong_dtype
namespace ember {

// The schema says `ScalarType? dtype`, the optional dtype a caller may omit;
// this kernel takes a plain c10::ScalarType. It compiles.
at::Tensor empty_wrong_dtype(
    c10::SymIntArrayRef size, c10::ScalarType dtype,
    std::optional<c10::Layout> layout, std::optional<c10::Device> device,
    std::optional<bool> pin_memory,
    std::optional<c10::MemoryFormat> memory_format) {
  // Never runs: the registration below is refused when the library loads.
  return at::Tensor();
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_wrong_dtype));
}

} // namespace ember
// ember-book: end exercise_wrong_dtype

// ember-book: begin exercise_fill
namespace ember {

// Everything the kernel needs, in host memory the kernel may read.
struct FillArgs {
  char* first;                  // device memory: the first element
  const char* value;            // host memory: one element's bytes
  int64_t itemsize;
  int64_t numel;
  std::vector<int64_t> sizes, strides;
};

// Runs inside emLaunchKernel, the only place where device memory can be
// reached: not at its device address, which stays inaccessible, but that
// address plus the driver's kernel offset. Walks the elements in index order.
void fillKernel(void* raw) {
  const FillArgs& args = *static_cast<const FillArgs*>(raw);
  ptrdiff_t device_offset = 0;
  if (emGetKernelOffset(&device_offset) != emSuccess) return;
  char* const first = args.first + device_offset;
  const size_t dims = args.sizes.size();
  std::vector<int64_t> index(dims, 0);
  for (int64_t n = 0; n < args.numel; ++n) {
    int64_t offset = 0;
    for (size_t d = 0; d < dims; ++d) offset += index[d] * args.strides[d];
    std::memcpy(first + offset * args.itemsize, args.value, args.itemsize);
    for (size_t d = dims; d-- > 0;) {  // next index, last dimension fastest
      if (++index[d] < args.sizes[d]) break;
      index[d] = 0;
    }
  }
}

at::Tensor& fill_scalar_(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  // ATen's CPU fill converts the Scalar to self's dtype (and checks overflow).
  const at::Tensor host = at::empty({}, self.options().device(at::kCPU)).fill_(value);
  FillArgs args{static_cast<char*>(self.mutable_data_ptr()),
                static_cast<const char*>(host.const_data_ptr()),
                static_cast<int64_t>(self.itemsize()), self.numel(),
                self.sizes().vec(), self.strides().vec()};
  void* buffers[] = {self.mutable_data_ptr()};
  EMBER_CHECK(emLaunchKernel(&fillKernel, &args, buffers, 1));
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar_));
  // The lambda form of m.impl: no capture, so nothing is stored but the
  // lambda's (empty) object; its call operator is known at compile time.
  m.impl("zero_", [](at::Tensor& self) -> at::Tensor& {
    return fill_scalar_(self, 0);
  });
}

} // namespace ember
// ember-book: end exercise_fill
