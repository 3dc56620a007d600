// Earlier versions of parts that chapter 14 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
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
