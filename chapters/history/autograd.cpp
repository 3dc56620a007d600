// Earlier versions of parts that the autograd chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin autograd_custom_abs.v1
// No derivative yet: a clear error if backward reaches custom_abs, for
// every backend (the Autograd alias key fills AutogradPrivateUse1 and
// AutogradCPU alike).
TORCH_LIBRARY_IMPL(ember, Autograd, m) {
  m.impl("custom_abs", torch::autograd::autogradNotImplementedFallback());
}
// ember-book: end autograd_custom_abs.v1

// ember-book: begin autograd_custom_abs_inplace.v1
@@ -23,3 +23,1 @@ sha256:185bc3f44c
+// No derivative: refuse backward through it with a clear error.
@@ -29,5 +26,0 @@ sha256:4eea3243f6
// ember-book: end autograd_custom_abs_inplace.v1

// ember-book: begin autograd_custom_abs.v2
@@ -9,4 +8,0 @@ sha256:056e7f7610
// ember-book: end autograd_custom_abs.v2

// ember-book: begin autograd_tanh.v1
@@ -3,14 +3,26 @@ sha256:27dc6f1715
+// tanh's backward on ember: grad * (1 - y^2) from the result y. ATen's formula
+// calls tanh_backward, one more operator for the backend to implement; ember
+// computes it from elementwise operators it already has (mul, neg, add).
+struct EmberTanhFunction
+    : public torch::autograd::Function<EmberTanhFunction> {
+  static at::Tensor forward(torch::autograd::AutogradContext* ctx,
+                            const at::Tensor& self) {
+    at::Tensor result;
+    {
+      at::AutoDispatchBelowADInplaceOrView guard;
+      result = at::tanh(self);
+    }
+    ctx->save_for_backward({result});
+    return result;
+  }
+
+  static torch::autograd::variable_list backward(
+      torch::autograd::AutogradContext* ctx,
+      torch::autograd::variable_list grad_outputs) {
+    const at::Tensor result = ctx->get_saved_variables()[0];
+    return {grad_outputs[0].mul(result.mul(result).neg_().add_(1))};
+  }
+};
+
+at::Tensor tanhAutograd(const at::Tensor& self) {
+  return EmberTanhFunction::apply(self);
@@ -21,3 +33,3 @@ sha256:50019e9946
+// Ember only: CPU keeps ATen's formula.
+TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
+  m.impl("tanh", &ember::tanhAutograd);
// ember-book: end autograd_tanh.v1
