// Kernels that change which bytes a tensor owns: resize_, set_, and `.data =`.
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/set_native.h>
#include <c10/core/Allocator.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/Storage.h>
#include <c10/core/SymIntArrayRef.h>
#include <torch/library.h>

#include <algorithm>
#include <optional>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin resize
namespace ember {

// Gives a storage `nbytes` bytes of ember memory, keeping its old contents.
// ATen's resize_bytes_cpu does this with a host memcpy, which would read
// device memory from the host; here the driver moves the bytes.
void resizeStorageBytes(c10::StorageImpl& storage, size_t nbytes) {
  TORCH_CHECK(storage.resizable(), "ember: cannot resize a storage that is "
              "not resizable (it does not own its memory)");
  const c10::DeviceGuard guard(storage.device()); // allocate where it lives
  c10::DataPtr fresh = storage.allocator()->allocate(nbytes);
  const size_t kept = std::min(nbytes, storage.nbytes());
  if (kept > 0) {
    EMBER_CHECK(emMemcpy(fresh.get(), storage.data(), kept,
                         emMemcpyDeviceToDevice));
  }
  // The old DataPtr is released here: its deleter frees the old block.
  storage.set_data_ptr_noswap(std::move(fresh));
  storage.set_nbytes(nbytes);
}

// After a tensor's sizes, strides or offset changed: grow its storage if its
// elements now reach past the end. Storage never shrinks (as on CPU/CUDA).
void ensureStorageFits(c10::TensorImpl& self) {
  if (self.numel() == 0) {
    return; // no element to hold, whatever the offset says
  }
  const size_t needed = at::detail::computeStorageNbytes(
      self.sizes(), self.strides(), self.dtype().itemsize(),
      self.storage_offset());
  const c10::Storage& storage = self.unsafe_storage();
  if (needed > storage.nbytes()) {
    resizeStorageBytes(*storage.unsafeGetStorageImpl(), needed);
  }
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef sym_size,
                          std::optional<c10::MemoryFormat> memory_format) {
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  for (const int64_t dim : size) {
    TORCH_CHECK(dim >= 0, "ember: aten::resize_ got the negative size ", dim,
                " in ", size, ": every dimension must be >= 0");
  }
  c10::TensorImpl& impl = *self.unsafeGetTensorImpl();
  // The metadata half of ATen's CPU resize: new sizes, contiguous strides.
  // With resize_storage=false it never touches the storage; we do that.
  at::native::resize_impl_cpu_(&impl, size, /*stride=*/std::nullopt,
                               /*resize_storage=*/false);
  ensureStorageFits(impl);
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != c10::MemoryFormat::Preserve,
                "ember: aten::resize_ does not support torch.preserve_format");
    impl.empty_tensor_restride(*memory_format);
  }
  return self;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("resize_", TORCH_FN(resize_));
}

} // namespace ember
// ember-book: end resize

// ember-book: begin set_storage
namespace ember {

// t.set_(storage, offset, size, stride): point t at (part of) a storage. The
// other overloads below reduce to this one.
at::Tensor& set_storage_offset_(at::Tensor& self, c10::Storage source,
                                c10::SymInt sym_storage_offset,
                                c10::SymIntArrayRef sym_size,
                                c10::SymIntArrayRef sym_stride) {
  const int64_t storage_offset = sym_storage_offset.expect_int();
  const c10::IntArrayRef size = C10_AS_INTARRAYREF_SLOW(sym_size);
  const c10::IntArrayRef stride = C10_AS_INTARRAYREF_SLOW(sym_stride);
  // ATen's checks: lengths match, offset >= 0, same device, in bounds if
  // the shape is unchanged. Then it swaps the storage in.
  at::native::checkSetStorage(self, std::move(source), storage_offset, size,
                              stride);
  c10::TensorImpl& impl = *self.unsafeGetTensorImpl();
  impl.set_storage_offset(storage_offset);
  // stride=[] (the schema default) means contiguous strides.
  const at::OptionalIntArrayRef strides = stride.data() != nullptr
      ? at::OptionalIntArrayRef(stride)
      : std::nullopt;
  at::native::resize_impl_cpu_(&impl, size, strides, /*resize_storage=*/false);
  ensureStorageFits(impl); // like CPU: a set_ past the end grows the storage
  return self;
}

// t.set_(storage): all of the storage, as a 1-D tensor of t's dtype.
at::Tensor& set_storage_(at::Tensor& self, c10::Storage source) {
  return at::native::set_(self, std::move(source)); // calls the one above
}

// t.set_(other): share other's storage, offset, sizes and strides.
at::Tensor& set_tensor_(at::Tensor& self, const at::Tensor& source) {
  return at::native::set_tensor_(self, source); // calls the one above
}

// t.set_(): an empty storage on t's device.
at::Tensor& set_empty_(at::Tensor& self) {
  const c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0,
                     c10::GetAllocator(c10::DeviceType::PrivateUse1),
                     /*resizable=*/true);
  return self.set_(std::move(empty), 0, {0}, {});
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage_offset_));
  m.impl("set_.source_Storage", TORCH_FN(set_storage_));
  m.impl("set_.source_Tensor", TORCH_FN(set_tensor_));
  m.impl("set_", TORCH_FN(set_empty_));
}

} // namespace ember
// ember-book: end set_storage

// ember-book: begin shallow_copy_type
namespace ember {

// `param.data = t` replaces param's TensorImpl contents with t's, and asks
// this operator first whether the two TensorImpls are interchangeable. The
// default (CompositeImplicitAutograd) answer only knows built-in dense
// backends (CPU, CUDA, ...), so CPU <-> ember would be refused. Both are plain
// dense strided TensorImpls: say so.
bool has_compatible_shallow_copy_type(const at::Tensor& self,
                                      const at::Tensor& from) {
  const auto dense_cpu_or_ember = [](c10::DispatchKeySet keys) {
    return keys.has(c10::DispatchKey::CPU) ||
        keys.has(c10::DispatchKey::PrivateUse1);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(
             from.key_set()) ||
      (dense_cpu_or_ember(self.key_set()) &&
       dense_cpu_or_ember(from.key_set()));
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type",
         TORCH_FN(has_compatible_shallow_copy_type));
}

} // namespace ember
// ember-book: end shallow_copy_type

// ember-book: begin storage_resize
#include "runtime/EmberHooks.h" // the slots: PlugResizeBytes

namespace ember {

void resizeStorageBytes(c10::StorageImpl& storage, size_t nbytes); // above

// UntypedStorage.resize_(n) does not dispatch: PyTorch calls the PrivateUse1
// hooks' resizePrivateUse1Bytes, which the stable library forwards to the
// function plugged here. It may grow or shrink; the driver copies the bytes
// both keep.
void resizeStorageThroughHooks(const c10::Storage& storage, size_t nbytes) {
  resizeStorageBytes(*storage.unsafeGetStorageImpl(), nbytes);
}

static PlugResizeBytes plug_resize_bytes(&resizeStorageThroughHooks);

} // namespace ember
// ember-book: end storage_resize
