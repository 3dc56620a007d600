// Earlier versions of parts that the generator chapter shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/parts/regions.py, book/run/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin random_registration.v1
// Every random operator with a Generator argument that ember implements;
// the others (geometric_, cauchy_, log_normal_, ...) still reach the CPU
// fallback, which refuses them.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("uniform_", &ember::uniform_);
  m.impl("normal_", &ember::normal_);
  m.impl("exponential_", &ember::exponential_);
  m.impl("bernoulli_.float", &ember::bernoulliScalar_);
  m.impl("bernoulli_.Tensor", &ember::bernoulliTensor_);
  m.impl("random_", &ember::random_);
  m.impl("random_.to", &ember::randomTo_);
  m.impl("random_.from", &ember::randomFrom_);
  m.impl("randperm.generator_out", &ember::randpermOut);
  m.impl("multinomial", &ember::multinomial);
  m.impl("multinomial.out", &ember::multinomialOut);
  m.impl("native_dropout", &ember::nativeDropout);
  m.impl("native_dropout_backward", &ember::nativeDropoutBackward);
}
// ember-book: end random_registration.v1

// ember-book: begin reserve_random.v1
@@ -3,5 +2,0 @@ sha256:c999780576
@@ -15,1 +9,0 @@ sha256:6435cb6e70
// ember-book: end reserve_random.v1

// ember-book: begin dropout.v1
@@ -28,4 +28,2 @@ sha256:35214dfffe
+    const PhiloxSeed key =
+        reserveRandom("aten::native_dropout", std::nullopt, input, 1);
@@ -33,4 +31,1 @@ sha256:427822c470
+    launch({in.data_ptr(), output.data_ptr(), mask.data_ptr()}, [&](ptrdiff_t offset) {
@@ -69,2 +64,1 @@ sha256:4b8f901e32
+    launch({g.data_ptr(), m.data_ptr(), result.data_ptr()}, [&](ptrdiff_t offset) {
// ember-book: end dropout.v1

// ember-book: begin random_fill.v1
@@ -17,2 +17,1 @@ sha256:31fd9f7520
+  const PhiloxSeed key = reserveRandom(op, generator, self, 1);
@@ -22,3 +21,1 @@ sha256:b4b2d52444
+  launch({out.data_ptr()}, [&](ptrdiff_t offset) {
// ember-book: end random_fill.v1

// ember-book: begin bernoulli_randperm.v1
@@ -17,2 +17,2 @@ sha256:b7c2c452a3
+    const PhiloxSeed key =
+        reserveRandom("aten::bernoulli_.Tensor", generator, self, 1);
@@ -21,6 +21,1 @@ sha256:603d84b6b8
+    launch({out.data_ptr(), probs.data_ptr()}, [&](ptrdiff_t offset) {
@@ -53,2 +48,1 @@ sha256:8df0ee552e
+  const PhiloxSeed key = reserveRandom("aten::randperm", generator, out, 1);
@@ -56,2 +50,1 @@ sha256:e966fa01ec
+  launch({result.data_ptr()}, [&](ptrdiff_t offset) {
// ember-book: end bernoulli_randperm.v1

// ember-book: begin multinomial.v1
@@ -75,7 +75,2 @@ sha256:6118bb8be3
+    const PhiloxSeed key = reserveRandom("aten::multinomial", generator, self, 1);
+    launch({weights.data_ptr(), result.data_ptr()}, [&](ptrdiff_t offset) {
// ember-book: end multinomial.v1
