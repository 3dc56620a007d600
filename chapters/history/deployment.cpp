// Earlier versions of parts that the deployment chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin blas_ops.v3
@@ -17,2 +16,0 @@ sha256:f5892e8d23
@@ -20,3 +18,1 @@ sha256:d92a736f06
+                "ember: ", op, " expects all tensors on one ember device, "
@@ -24,1 +20,1 @@ sha256:0d41ae9b0b
+                " on ", t->device());
// ember-book: end blas_ops.v3

// ember-book: begin host_kernel.v2
@@ -3,2 +3,2 @@ sha256:1242d93ea0
+// onHost's check of each tensor, before the launch: the operator, the
+// device it runs on, and the tensor's.
@@ -6,3 +6,2 @@ sha256:ccaf328d48
+  TORCH_CHECK(t.device() == device, "ember: ", op, " expects all tensors on ",
+              device, ", got one on ", t.device());
@@ -191,1 +189,0 @@ sha256:0a98b76b44
@@ -214,2 +212,6 @@ sha256:b73037da6d
+    } else {
+      // Only a CPU scalar may come along; the CPU kernel would take any
+      // other CPU tensor as is, and mix devices behind the caller's back.
+      TORCH_CHECK(t.is_cpu() && t.dim() == 0, "ember: ", name, " expects ",
+                  "ember tensors (and CPU scalars), got a ", t.dim(),
+                  "-D tensor on ", t.device());
@@ -221,8 +222,0 @@ sha256:ddef532441
// ember-book: end host_kernel.v2

// ember-book: begin reductions.v3
@@ -7,8 +7,4 @@ sha256:c1f28e21f9
+// each group into its output element. Chunks of the same output element must
+// not run at once, so the loop is serial. Where the innermost run is reduced
+// (output stride 0), it is summed in a wider accumulator first (double for
+// float, as ATen's CPU kernels do) and added once.
@@ -18,12 +14,3 @@ sha256:639348dc3b
+  iter.output(0).fill_(0); // ATen's CPU kernel starts from zero too
+  launchRecorded(op, iter, [](at::TensorIteratorBase& it,
+                              const KernelOperands& operands) {
@@ -34,2 +21,1 @@ sha256:4cf62ce26f
+          if (strides[0] == 0) {
@@ -42,4 +28,2 @@ sha256:339cde7c30
+            *out = static_cast<T>(*out + acc);
+          } else {
@@ -47,2 +31,1 @@ sha256:827b5799df
+              element(out, strides[0], i) += element(in, strides[1], i);
// ember-book: end reductions.v3

// ember-book: begin nll_loss.v2
@@ -19,6 +19,2 @@ sha256:923238abce
+  TORCH_CHECK(target.device() == self.device(), "ember: ", op, " expects the ",
+              "target on ", self.device(), ", got it on ", target.device());
// ember-book: end nll_loss.v2

// ember-book: begin batch_norm.v2
@@ -30,4 +30,1 @@ sha256:ffdd1a21bf
+// running statistics; the saved ones are empty, as on the CPU.
@@ -70,6 +66,0 @@ sha256:2d96fc68be
@@ -77,18 +67,0 @@ sha256:c0c60575af
@@ -149,3 +121,0 @@ sha256:26e6eacf4a
// ember-book: end batch_norm.v2

// ember-book: begin graph_impl.v2
@@ -16,1 +15,0 @@ sha256:e0c61f66bd
@@ -51,1 +49,0 @@ sha256:07b9a10b4d
@@ -59,1 +56,0 @@ sha256:d000bdea76
@@ -64,3 +61,3 @@ sha256:b7a3dccfee
+                "and compiled), device copies and copies from pinned host "
+                "memory; a synchronize, a copy to pageable host memory, a host "
+                "read of a device value and a random kernel cannot be "
@@ -76,1 +72,0 @@ sha256:3345ac5aff
@@ -80,3 +75,0 @@ sha256:a49135bca8
@@ -98,2 +90,0 @@ sha256:621bb5894a
@@ -126,4 +116,0 @@ sha256:f238b2e5a6
// ember-book: end graph_impl.v2
