// Earlier versions of parts that the matrix_products chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin blas_ops.v1
@@ -5,1 +5,2 @@ sha256:2079f6d1e2
+// Every tensor of a call on the first one's ember device, with its dtype,
+// which must be one the loops are compiled for.
@@ -26,2 +27,4 @@ sha256:169759946f
+  const at::ScalarType dtype = first->scalar_type();
+  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kLong,
+              "ember: ", op, " on ", first->device(), " supports float32, "
+              "float64 and int64 tensors, got ", dtype);
@@ -55,1 +58,1 @@ sha256:afbe384665
+void matmulInto(const at::Tensor& a, const at::Tensor& b,
@@ -73,20 +76,2 @@ sha256:b6c6cb65ce
+  AT_DISPATCH_FLOATING_TYPES_AND(at::kLong, dtype, "ember_gemm", [&] {
+    using T = scalar_t;
@@ -101,1 +86,1 @@ sha256:737db166c7
+  });
@@ -114,1 +99,1 @@ sha256:f760e9f3a5
+  matmulInto(self, mat2, nullptr, 0, 1, out);
@@ -128,1 +113,1 @@ sha256:71cfc5fcdb
+  matmulInto(self, mat2, nullptr, 0, 1, out);
@@ -152,1 +137,1 @@ sha256:111cc14b5c
+  matmulInto(mat1, mat2, &input, beta, alpha, out);
@@ -158,4 +142,0 @@ sha256:2f47c96f0d
@@ -166,1 +146,0 @@ sha256:2382421ee6
// ember-book: end blas_ops.v1
