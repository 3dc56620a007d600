// Earlier versions of parts that the minimal_ops chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin sparse_factories.v1
namespace ember {

// BackendSelect turns a sparse layout into the SparsePrivateUse1 or
// SparseCsrPrivateUse1 key before any PrivateUse1 kernel runs, so
// empty_memory_format never sees it: the layout check must sit at those keys.
at::Tensor empty_sparse(
    c10::SymIntArrayRef /*size*/, std::optional<c10::ScalarType> /*dtype*/,
    std::optional<c10::Layout> layout, std::optional<c10::Device> /*device*/,
    std::optional<bool> /*pin_memory*/,
    std::optional<c10::MemoryFormat> /*memory_format*/) {
  checkStridedLayout("aten::empty.memory_format", layout);
  TORCH_INTERNAL_ASSERT(false, "ember: a sparse dispatch key with layout=",
                        layoutName(c10::layout_or_default(layout)));
}

TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_sparse));
}

TORCH_LIBRARY_IMPL(aten, SparseCsrPrivateUse1, m) {
  m.impl("empty.memory_format", TORCH_FN(empty_sparse));
}

} // namespace ember
// ember-book: end sparse_factories.v1

// ember-book: begin copy_from.v1
@@ -1,17 +0,0 @@ sha256:55bdfd6937
@@ -36,10 +18,0 @@ sha256:f877f5e1ab
@@ -48,3 +21,2 @@ sha256:a9323d165e
+  EMBER_CHECK(emMemcpy(host.mutable_data_ptr(), device_tensor.const_data_ptr(),
+                       spanBytes(device_tensor), emMemcpyDeviceToHost));
@@ -55,3 +27,2 @@ sha256:33973dfaf6
+  EMBER_CHECK(emMemcpy(device_tensor.mutable_data_ptr(), host.const_data_ptr(),
+                       spanBytes(device_tensor), emMemcpyHostToDevice));
@@ -85,13 +56,2 @@ sha256:a93d06269f
+    EMBER_CHECK(emMemcpy(dst.mutable_data_ptr(), self.const_data_ptr(),
+                         dst.nbytes(), kind));
@@ -105,12 +64,0 @@ sha256:7f7ab5311d
// ember-book: end copy_from.v1

// ember-book: begin local_scalar_dense.v1
@@ -8,3 +8,2 @@ sha256:35db3912ef
+  EMBER_CHECK(emMemcpy(host.mutable_data_ptr(), self.const_data_ptr(),
+                       self.itemsize(), emMemcpyDeviceToHost));
// ember-book: end local_scalar_dense.v1
