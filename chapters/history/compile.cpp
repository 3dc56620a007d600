// Earlier versions of parts that the compile chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin compiled_launch.v1
@@ -92,1 +91,0 @@ sha256:c39583095e
// ember-book: end compiled_launch.v1

// ember-book: begin graph_impl.v1
@@ -26,4 +26,1 @@ sha256:043526200e
+  void capture_begin(at::MempoolId_t pool, at::GraphCaptureMode) override {
@@ -38,8 +35,1 @@ sha256:e8fbbb3826
+    const emError_t began = emStreamBeginCapture(device_, stream_);
@@ -59,6 +49,4 @@ sha256:ccc3e1e678
+                "failed: ", emGetErrorDetail(ended), ". Ember records kernels "
+                "launched by value (the ones torch.compile generates); an eager "
+                "ember operator, a copy to or from the host and a synchronize "
+                "cannot be captured.");
// ember-book: end graph_impl.v1
