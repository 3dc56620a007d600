// Earlier versions of parts that the capstone chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin convolution.v3
@@ -13,9 +12,0 @@ sha256:fd12bc0547
@@ -28,5 +19,3 @@ sha256:6df9b442e2
+      &hostKernel, at::_ops::convolution>::call(input, weight, bias, stride,
+                                                padding, dilation, transposed,
+                                                output_padding, groups);
@@ -48,10 +37,7 @@ sha256:968f444fb0
+  return at::native::call_fallback_fn_symint<
+      &hostKernel, at::_ops::convolution_backward>::call(grad_output, input,
+                                                         weight, bias_sizes,
+                                                         stride, padding,
+                                                         dilation, transposed,
+                                                         output_padding,
+                                                         groups, output_mask);
// ember-book: end convolution.v3

// ember-book: begin batch_norm.v1
@@ -55,1 +55,1 @@ sha256:4d175a91b1
+  onHost(op, input.device(),
@@ -59,1 +59,1 @@ sha256:65f27fd078
+         [&](const HostView& host) {
@@ -91,1 +91,1 @@ sha256:4d175a91b1
+  onHost(op, input.device(),
@@ -95,1 +95,1 @@ sha256:65f27fd078
+         [&](const HostView& host) {
// ember-book: end batch_norm.v1

// ember-book: begin random_registration.v2
@@ -31,22 +30,0 @@ sha256:4d83405a68
@@ -68,1 +46,1 @@ sha256:e01069f3d5
+  m.impl("native_dropout_backward", &ember::nativeDropoutBackwardAnyDtype);
// ember-book: end random_registration.v2

// ember-book: begin random_dtypes.v1
@@ -1,3 +0,0 @@ sha256:e03d74b341
@@ -18,0 +16,6 @@
+at::Tensor& randomFrom_(at::Tensor& self, int64_t from,
+                        std::optional<int64_t> to,
+                        std::optional<at::Generator> generator);
+std::pair<int64_t, uint64_t> integerRange(const at::Tensor& self,
+                                          int64_t from,
+                                          std::optional<int64_t> to);
@@ -30,3 +32,0 @@ sha256:d5dbed1b0a
@@ -104,71 +103,0 @@ sha256:1ad46ffedc
@@ -176,4 +105,4 @@ sha256:825d9df9b7
+// self's dtype (integerRange, chapter 10): without `to` it ends at the
+// largest integer the dtype holds exactly, and an integer dtype's `from`
+// and `to - 1` must lie in its range, as on the CPU (a uint8 tensor's
+// random_(0, 300) is refused, not wrapped).
@@ -183,1 +111,0 @@ sha256:bc275a4c0c
@@ -185,1 +113,1 @@ sha256:27c4a6db71
+    return randomFrom_(self, from, to, generator);
@@ -186,0 +115,1 @@
+  const auto [first, range] = integerRange(self, from, to);
@@ -197,3 +125,0 @@ sha256:2ce3401f95
@@ -202,6 +127,0 @@ sha256:2547a93947
// ember-book: end random_dtypes.v1

// ember-book: begin nll_loss.v1
@@ -26,1 +26,1 @@ sha256:d505c6d794
+  onHost(op, self.device(),
@@ -28,1 +28,1 @@ sha256:65f27fd078
+         [&](const HostView& host) {
@@ -44,1 +44,1 @@ sha256:d505c6d794
+  onHost(op, self.device(),
@@ -47,1 +47,1 @@ sha256:65f27fd078
+         [&](const HostView& host) {
// ember-book: end nll_loss.v1

// ember-book: begin blas_ops.v2
@@ -99,2 +99,2 @@ sha256:828525a3e9
+    launch({p.a.data, p.b.data, p.s.data, p.c.data},
+           [&](ptrdiff_t offset) { gemm(atOffset(p, offset)); });
// ember-book: end blas_ops.v2

// ember-book: begin fill_where.v2
@@ -15,4 +15,2 @@ sha256:04925e3b88
+  launch("aten::fill_", iter, [&](const KernelOperands& operands) {
+    iter.for_each([&](char** data, const int64_t* strides, int64_t n) {
@@ -60,4 +58,2 @@ sha256:b06da2ec96
+  launch("aten::where.self_out", iter, [&](const KernelOperands& operands) {
+    iter.for_each([&](char** data, const int64_t* s, int64_t n) {
// ember-book: end fill_where.v2

// ember-book: begin host_kernel.v1
@@ -20,156 +19,0 @@ sha256:b460916e32
@@ -227,32 +70,0 @@ sha256:7323c74811
@@ -292,29 +103,0 @@ sha256:112590b3d7
// ember-book: end host_kernel.v1

// ember-book: begin reductions.v2
@@ -15,3 +15,2 @@ sha256:c6c646ba6a
+  launch(op, iter, [&](const KernelOperands& operands) {
+    iter.serial_for_each(
@@ -35,1 +34,1 @@ sha256:d8909de3fe
+        {0, iter.numel()});
// ember-book: end reductions.v2

// ember-book: begin softmax.v1
@@ -14,1 +14,1 @@ sha256:6f242ce79f
+  onHost(op, self.device(), {&self, &out}, [&](const HostView& host) {
@@ -32,2 +32,2 @@ sha256:7cef3dd2fc
+  onHost(op, output.device(), {&grad_output, &output, &grad_input},
+         [&](const HostView& host) {
// ember-book: end softmax.v1

// ember-book: begin max_pool2d.v1
@@ -56,3 +56,1 @@ sha256:c6c08fe955
+  onHost(op, self.device(), {&self, &out, &indices}, [&](const HostView& host) {
@@ -60,2 +58,2 @@ sha256:c1f4421bad
+    at::max_pool2d_with_indices_outf(host(self), kernel_size, stride, padding,
+                                     dilation, ceil_mode, h_out, h_indices);
@@ -78,3 +76,2 @@ sha256:3ca5b06492
+  onHost(op, self.device(), {&grad_output, &self, &indices, &grad_input},
+         [&](const HostView& host) {
@@ -83,2 +80,2 @@ sha256:071f4be833
+               host(grad_output), host(self), kernel_size, stride, padding,
+               dilation, ceil_mode, host(indices), h_grad_input);
// ember-book: end max_pool2d.v1
