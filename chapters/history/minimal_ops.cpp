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
