// Earlier versions of parts that the custom_ops chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin custom_abs.v1
@@ -33,10 +33,4 @@ sha256:f082564131
+  // The loop wants contiguous memory (a copy, if self is a strided view).
+  const at::Tensor input = self.contiguous();
+  at::Tensor out = at::empty(input.sizes(), input.options());
+  if (input.numel() == 0) {
@@ -45,2 +39,2 @@ sha256:02fd36843d
+  AT_DISPATCH_FLOATING_TYPES(input.scalar_type(), "custom_abs_ember", [&] {
+    const scalar_t* in = input.const_data_ptr<scalar_t>();
@@ -48,1 +42,1 @@ sha256:5486cf8b6d
+    const int64_t n = input.numel();
// ember-book: end custom_abs.v1

// ember-book: begin custom_abs.v2
@@ -52,1 +52,1 @@ sha256:bb820be196
+    launch({in, result}, [&](ptrdiff_t offset) {
// ember-book: end custom_abs.v2
