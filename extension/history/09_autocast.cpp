// Earlier versions of parts that chapter 09 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin autocast_mm.v1
@@ -4,3 +4,1 @@ sha256:7c91a5aedb
+// region says otherwise), then mm itself.
@@ -12,4 +10,4 @@ sha256:ea05231ebe
+  const at::ScalarType dtype =
+      at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1);
+  return at::mm(at::autocast::cached_cast(dtype, self),
+                at::autocast::cached_cast(dtype, mat2));
// ember-book: end autocast_mm.v1

// ember-book: begin autocast_custom_abs.v1
@@ -14,2 +14,1 @@ sha256:8866df809b
+TORCH_LIBRARY_IMPL(ember, Autocast, m) {
// ember-book: end autocast_custom_abs.v1
