// Earlier versions of parts that chapter 04 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin convolution.v1
@@ -3,12 +3,7 @@ sha256:19fc549014
+// The registration found in many out-of-tree backends: a kernel for conv2d,
+// the operator the model calls. It computes the right numbers.
+at::Tensor conv2d(const at::Tensor& input, const at::Tensor& weight,
+                  const std::optional<at::Tensor>& bias,
+                  c10::SymIntArrayRef stride, c10::SymIntArrayRef padding,
+                  c10::SymIntArrayRef dilation, c10::SymInt groups) {
+  constexpr const char* op = "aten::conv2d";
@@ -20,17 +14,0 @@ sha256:2b57f7421a
@@ -38,3 +16,1 @@ sha256:991b7f0569
+  m.impl("conv2d", TORCH_FN(conv2d));
// ember-book: end convolution.v1

// ember-book: begin fill_where.v1
@@ -6,7 +6,2 @@ sha256:ac52f9c68a
+// need the element's size, not its dtype, and four copies cover every dtype
+// up to 8 bytes.
@@ -47,1 +41,0 @@ sha256:6d6bb5281f
@@ -86,1 +79,0 @@ sha256:6d3d61cb71
// ember-book: end fill_where.v1

// ember-book: begin blas_ops.v1
@@ -5,1 +5,2 @@ sha256:2079f6d1e2
+// Every tensor of a call on the first one's ember device, with its dtype,
+// which must be one the loops are compiled for.
@@ -26,2 +27,4 @@ sha256:dca057bae5
+  const at::ScalarType dtype = first->scalar_type();
+  TORCH_CHECK(dtype == at::kFloat || dtype == at::kDouble || dtype == at::kLong,
+              "ember: ", op, " on ", first->device(), " supports float32, "
+              "float64 and int64 tensors, got ", dtype);
@@ -55,1 +58,1 @@ sha256:afbe384665
+void matmulInto(const at::Tensor& a, const at::Tensor& b,
@@ -73,20 +76,2 @@ sha256:51565007fd
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

// ember-book: begin reductions.v1
@@ -63,4 +62,0 @@ sha256:0de9bb2a42
@@ -70,7 +66,2 @@ sha256:1a11affc9e
+  return structuredOut<at::native::structured_sum_out>(out, self, dim, keepdim,
+                                                       dtype);
@@ -82,7 +73,2 @@ sha256:b767edb8c8
+  return structuredOut<at::native::structured_mean_out>(out, self, dim,
+                                                        keepdim, dtype);
// ember-book: end reductions.v1

// ember-book: begin convolution.v2
@@ -7,6 +6,0 @@ sha256:10a3ec7838
@@ -18,4 +12,6 @@ sha256:40fd12dd65
+  constexpr const char* op = "aten::convolution_overrideable";
+  TORCH_CHECK(!transposed, "ember: ", op, " on ", input.device(),
+              ": transposed convolutions are not implemented");
+  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
+                          groups.expect_int());
+  return forward(op, input, weight, bias, s);
@@ -33,11 +29,6 @@ sha256:50fa190fb4
+  constexpr const char* op = "aten::convolution_backward_overrideable";
+  TORCH_CHECK(!transposed, "ember: ", op, " on ", input.device(),
+              ": transposed convolutions are not implemented");
+  const Shape s = shapeOf(op, input, weight, stride, padding, dilation,
+                          groups.expect_int());
+  return backward(op, grad_output, input, weight, s, output_mask);
// ember-book: end convolution.v2

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
