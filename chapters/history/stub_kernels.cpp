// Earlier versions of parts that the stub_kernels chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin binary_ops.v1
@@ -49,3 +48,0 @@ sha256:8906a7da61
@@ -57,7 +54,2 @@ sha256:c14f586c8c
+  return structuredOut<at::native::structured_ufunc_add_CPU>(out, self, other,
+                                                             alpha);
@@ -67,7 +59,1 @@ sha256:ed1dae7a61
+  return structuredOut<at::native::structured_sub_out>(out, self, other, alpha);
@@ -76,7 +62,1 @@ sha256:97a5467193
+  return structuredOut<at::native::structured_mul_out>(out, self, other);
@@ -85,7 +65,1 @@ sha256:8607165a95
+  return structuredOut<at::native::structured_div_out>(out, self, other);
// ember-book: end binary_ops.v1

// ember-book: begin comparison_ops.v1
@@ -39,3 +38,0 @@ sha256:8906a7da61
@@ -47,7 +44,2 @@ sha256:12ed2fedc2
+    return structuredOut<at::native::structured_##name##_Tensor_out>(        \
+        out, self, other);                                                   \
@@ -57,7 +49,2 @@ sha256:fb2a542022
+    return structuredOut<at::native::structured_##name##_Scalar_out>(        \
+        out, self, other);                                                   \
// ember-book: end comparison_ops.v1

// ember-book: begin unary_ops.v1
@@ -48,3 +47,0 @@ sha256:8906a7da61
@@ -55,7 +52,1 @@ sha256:544a8eacf3
+    return structuredOut<at::native::structured_##name##_out>(out, self);   \
// ember-book: end unary_ops.v1

// ember-book: begin relu_ops.v1
@@ -36,4 +35,0 @@ sha256:5932a4d54f
@@ -42,7 +38,1 @@ sha256:8e3fd871ef
+  return structuredOut<at::native::structured_clamp_min_out>(out, self, min);
@@ -55,9 +45,2 @@ sha256:6ac5560b0b
+  return structuredOut<at::native::structured_threshold_backward_out>(
+      grad_input, grad, self, threshold);
// ember-book: end relu_ops.v1

// ember-book: begin abs_out.v1
@@ -5,3 +4,0 @@ sha256:2d4741c62f
@@ -9,6 +6,1 @@ sha256:708546bfef
+  return at::native::abs_out(self, out);
// ember-book: end abs_out.v1

// ember-book: begin abs_stub.v1
@@ -1,2 +0,0 @@ sha256:8ee840f3d4
@@ -5,2 +3,5 @@ sha256:9c77afa71e
+// abs_stub's kernel, a first version: float32 only, written on the launch
+// alone. ATen has built the TensorIterator (output resized, dtypes checked).
+// for_each hands the body runs of n elements (split among threads): operand
+// k at data[k], the next element strides[k] bytes further, so any layout
+// works. Operand 0 is the output.
@@ -8,4 +9,11 @@ sha256:2637ee2f23
+  TORCH_CHECK(iter.common_dtype() == at::kFloat, "ember: aten::abs.out has ",
+              "no ember kernel for ", iter.common_dtype(), " tensors yet");
+  launch("aten::abs.out", iter, [&](const KernelOperands& operands) {
+    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
+      char* out = operands.at<char>(data, 0);
+      const char* in = operands.at<char>(data, 1);
+      for (int64_t i = 0; i < n; ++i) {
+        *reinterpret_cast<float*>(out + i * strides[0]) =
+            std::abs(*reinterpret_cast<const float*>(in + i * strides[1]));
+      }
+    });
@@ -16,1 +23,0 @@ sha256:4a5fe00eee
// ember-book: end abs_stub.v1

// ember-book: begin resize_out.v1
@@ -9,9 +9,6 @@ sha256:b6d956b93b
+  TORCH_CHECK(options.dtype() == out.dtype(), "ember: expected the out= ",
+              "tensor to have dtype ", options.dtype(), ", but got ",
+              out.dtype());
+  TORCH_CHECK(options.device() == out.device(), "ember: expected the out= ",
+              "tensor to be on ", options.device(), ", but got ",
+              out.device());
// ember-book: end resize_out.v1

// ember-book: begin elementwise.v1
@@ -18,18 +17,0 @@ sha256:365c2cc8d8
@@ -74,10 +56,2 @@ sha256:59a247373d
+  launch(op, iter, [&](const KernelOperands& operands) {
+    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
// ember-book: end elementwise.v1

// ember-book: begin fill_where.v1
@@ -6,7 +6,2 @@ sha256:ac52f9c68a
+// need the element's size, not its dtype, and four copies cover every dtype
+// up to 8 bytes.
@@ -47,1 +41,0 @@ sha256:6d6bb5281f
@@ -86,1 +79,0 @@ sha256:6d3d61cb71
// ember-book: end fill_where.v1

// ember-book: begin reductions.v1
@@ -63,4 +62,0 @@ sha256:0de9bb2a42
@@ -70,7 +66,2 @@ sha256:1a11affc9e
+  return structuredOut<at::native::structured_sum_out>(out, self, dim, keepdim,
+                                                       dtype);
@@ -82,7 +73,2 @@ sha256:b767edb8c8
+  return structuredOut<at::native::structured_mean_out>(out, self, dim,
+                                                        keepdim, dtype);
// ember-book: end reductions.v1

