// Earlier versions of parts that the fallback chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin cpu_fallback.v1
@@ -2,18 +1,0 @@ sha256:115ec38cc4
@@ -24,5 +5,0 @@ sha256:e007e380bf
// ember-book: end cpu_fallback.v1

// ember-book: begin cpu_fallback.v2
@@ -21,5 +20,0 @@ sha256:b88b0b8561
@@ -33,6 +27,0 @@ sha256:2d68152a27
// ember-book: end cpu_fallback.v2

// ember-book: begin fallback_one_device.v1
@@ -2,6 +1,0 @@ sha256:826f13bfc0
@@ -24,6 +18,4 @@ sha256:185433679a
+    TORCH_CHECK(tensor.device() == *first, "ember: ", op.operator_name(),
+                " got tensors on two ember devices, ", *first, " and ",
+                tensor.device(), "; the CPU fallback would return the result "
+                "on ", *first, " alone. Move the tensors to one device first.");
@@ -49,64 +41,1 @@ sha256:8a014df190
+static const RegisterFallbackCheck register_one_device(&checkOneEmberDevice);
@@ -118,3 +47,1 @@ sha256:c6dc995a19
+// CUDA refuses such a call up front with a device mismatch; so do we.
@@ -154,3 +81,1 @@ sha256:95db1335f3
+                  "ember: ", op.operator_name(), " writes into '",
@@ -158,1 +83,2 @@ sha256:cf3561984e
+                  ", but its inputs are on ", *ember, ": an out= tensor "
+                  "must be on the inputs' device (as on CUDA)");
@@ -163,2 +89,1 @@ sha256:94451cb7fa
+static const RegisterFallbackCheck register_outputs(&checkOutputsOnEmber);
// ember-book: end fallback_one_device.v1
