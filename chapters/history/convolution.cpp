// Earlier versions of parts that the convolution chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
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

// ember-book: begin convolution.v2
@@ -7,6 +6,0 @@ sha256:4b603ca565
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

// ember-book: begin conv_backward.v1
@@ -30,2 +30,1 @@ sha256:f10e8fddff
+    const c10::IntArrayRef strides = input.strides();
@@ -35,1 +34,1 @@ sha256:0273ce5b70
+    launch({go, in, w, gi, gw, gb}, [&](ptrdiff_t offset) {
// ember-book: end conv_backward.v1

// ember-book: begin conv_forward.v1
@@ -33,2 +33,1 @@ sha256:f10e8fddff
+    const c10::IntArrayRef strides = input.strides();
@@ -36,1 +35,1 @@ sha256:fef1565752
+    launch({in, w, b, o}, [&](ptrdiff_t offset) {
// ember-book: end conv_forward.v1
