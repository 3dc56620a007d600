// Earlier versions of parts that the autocast chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin autocast_mm.v1
@@ -4,3 +4,1 @@ sha256:7c91a5aedb
+// region says otherwise), then mm itself.
@@ -12,4 +10,4 @@ sha256:ea05231ebe
+  const at::ScalarType dtype =
+      at::autocast::get_autocast_dtype(c10::DeviceType::PrivateUse1);
+  return at::mm(at::autocast::cached_cast(dtype, self),
+                at::autocast::cached_cast(dtype, mat2));
// ember-book: end autocast_mm.v1

// ember-book: begin autocast_custom_abs.v1
@@ -14,2 +14,1 @@ sha256:8866df809b
+TORCH_LIBRARY_IMPL(ember, Autocast, m) {
// ember-book: end autocast_custom_abs.v1

// ember-book: begin sdpa_overrideable.v1
@@ -1,4 +0,0 @@ sha256:781eb1f0c0
@@ -26,24 +21,0 @@ sha256:57ae08aa41
@@ -82,4 +54,2 @@ sha256:34b824fe29
+  const Tensor output =
+      at::matmul(probabilities, value.to(at::kFloat)).to(query.scalar_type());
@@ -87,6 +57,2 @@ sha256:a1c893d7a7
+  return {output,  logsumexp, Tensor(), Tensor(), query.size(-2),
+          key.size(-2), Tensor(), Tensor(), Tensor()};
@@ -122,2 +88,2 @@ sha256:49bebdc698
+    grad_query = (at::matmul(d_scores, key.to(at::kFloat)) * factor)
+                     .to(query.scalar_type());
@@ -126,3 +92,3 @@ sha256:37d11f1c1a
+    grad_key =
+        (at::matmul(d_scores.transpose(-2, -1), query.to(at::kFloat)) * factor)
+            .to(key.scalar_type());
@@ -131,3 +97,2 @@ sha256:e8df17b284
+    grad_value = at::matmul(probabilities.transpose(-2, -1), d_out)
+                     .to(value.scalar_type());
@@ -135,6 +100,4 @@ sha256:46257216e5
+  if (grad_input_mask[3] && attn_bias.defined()) {
+    // A bias broadcast over batch or heads gets the sum over those.
+    grad_bias = at::sum_to(d_scores, attn_bias.sizes())
+                    .to(attn_bias.scalar_type());
// ember-book: end sdpa_overrideable.v1

// ember-book: begin sdpa_choice.v1
@@ -11,8 +10,0 @@ sha256:4ac577cb11
@@ -29,9 +20,0 @@ sha256:a26859eede
@@ -44,1 +27,1 @@ sha256:13781a35f7
+                    !enable_gqa;
@@ -53,1 +36,1 @@ sha256:cf085f350f
+                     "no dropout");
// ember-book: end sdpa_choice.v1

// ember-book: begin amp_unscale.v1
@@ -60,1 +60,1 @@ sha256:434f2e0067
+          launch({data, scale, inf}, [&](ptrdiff_t offset) {
// ember-book: end amp_unscale.v1

// ember-book: begin amp_update_scale.v1
@@ -38,1 +38,1 @@ sha256:b694d53120
+  launch({s, good, inf}, [&](ptrdiff_t offset) {
// ember-book: end amp_update_scale.v1
