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
@@ -30,4 +30,1 @@ sha256:ffdd1a21bf
+// running statistics; the saved ones are empty, as on the CPU.
@@ -70,6 +66,0 @@ sha256:2d96fc68be
@@ -77,18 +67,0 @@ sha256:c0c60575af
@@ -149,3 +121,0 @@ sha256:26e6eacf4a
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

// ember-book: begin reductions.v2
@@ -7,8 +7,4 @@ sha256:c1f28e21f9
+// each group into its output element. Chunks of the same output element must
+// not run at once, so the loop is serial. Where the innermost run is reduced
+// (output stride 0), it is summed in a wider accumulator first (double for
+// float, as ATen's CPU kernels do) and added once.
@@ -18,9 +14,1 @@ sha256:e53940a6a0
+  iter.output(0).fill_(0); // ATen's CPU kernel starts from zero too
@@ -32,2 +20,1 @@ sha256:4cf62ce26f
+          if (strides[0] == 0) {
@@ -40,4 +27,2 @@ sha256:339cde7c30
+            *out = static_cast<T>(*out + acc);
+          } else {
@@ -45,2 +30,1 @@ sha256:827b5799df
+              element(out, strides[0], i) += element(in, strides[1], i);
// ember-book: end reductions.v2

// ember-book: begin blas_ops.v2
@@ -17,2 +16,0 @@ sha256:f5892e8d23
@@ -20,3 +18,1 @@ sha256:d92a736f06
+                "ember: ", op, " expects all tensors on one ember device, "
@@ -24,1 +20,1 @@ sha256:0d41ae9b0b
+                " on ", t->device());
// ember-book: end blas_ops.v2

// ember-book: begin host_kernel.v1
@@ -3,2 +3,2 @@ sha256:1242d93ea0
+// onHost's check of each tensor, before the launch: the operator, the
+// device it runs on, and the tensor's.
@@ -6,3 +6,2 @@ sha256:ccaf328d48
+  TORCH_CHECK(t.device() == device, "ember: ", op, " expects all tensors on ",
+              device, ", got one on ", t.device());
@@ -35,1 +33,0 @@ sha256:0a98b76b44
@@ -58,2 +56,6 @@ sha256:b73037da6d
+    } else {
+      // Only a CPU scalar may come along; the CPU kernel would take any
+      // other CPU tensor as is, and mix devices behind the caller's back.
+      TORCH_CHECK(t.is_cpu() && t.dim() == 0, "ember: ", name, " expects ",
+                  "ember tensors (and CPU scalars), got a ", t.dim(),
+                  "-D tensor on ", t.device());
@@ -65,8 +66,0 @@ sha256:ddef532441
// ember-book: end host_kernel.v1

// ember-book: begin nll_loss.v1
@@ -19,6 +19,2 @@ sha256:923238abce
+  TORCH_CHECK(target.device() == self.device(), "ember: ", op, " expects the ",
+              "target on ", self.device(), ", got it on ", target.device());
// ember-book: end nll_loss.v1
