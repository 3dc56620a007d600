// Earlier versions of parts that chapter 10 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
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

// ember-book: begin random_integers.v1
@@ -9,10 +9,7 @@ sha256:45b9dc6934
+// modulo range), range 0 standing for all 2^64 values. By ATen's rules
+// (ATen/native/DistributionTemplates.h), so that ember accepts and refuses
+// what the CPU does: [from, to), a float dtype's bounds moved to integers
+// it holds exactly; without `to`, up to the largest integer the dtype holds
+// exactly (2^24 for float, 2^53 for double) or its maximum (2^63 - 1 for
+// Long); from = -2^63 without `to` draws all 2^64 values. An integer
+// dtype's bounds must lie in its range; a float's beyond 2^digits warn.
@@ -29,26 +26,3 @@ sha256:1dab52be65
+  TORCH_CHECK(!to.has_value() || from < *to, "ember: random_ expects from < "
+              "to, got from=", from, " to=", *to);
+  if (!to.has_value() && from == std::numeric_limits<int64_t>::lowest()) {
@@ -62,1 +35,0 @@ sha256:7a9734187f
@@ -64,3 +37,3 @@ sha256:8451c7da51
+      // Without `to`, the CPU wants from below 2^digits, not at it.
+      last = to.has_value() ? templates::update_to<scalar_t>(*to) - 1
+                            : (int64_t{1} << std::min(digits, 62)) - 1;
@@ -70,3 +43,11 @@ sha256:a7be84d810
+      const auto lowest = static_cast<int64_t>(
+          std::numeric_limits<scalar_t>::lowest());
+      const auto highest = static_cast<int64_t>(
+          std::numeric_limits<scalar_t>::max());
+      last = to.has_value() ? *to - 1 : highest;
+      TORCH_CHECK(from >= lowest && from <= highest, "ember: aten::random_ ",
+                  "on ", self.device(), ": from is out of bounds for ", type,
+                  " (got ", from, ")");
+      TORCH_CHECK(last >= lowest && last <= highest, "ember: aten::random_ ",
+                  "on ", self.device(), ": to - 1 is out of bounds for ",
+                  type, " (got ", last, ")");
@@ -75,1 +56,10 @@ sha256:3cf0c4e101
+  TORCH_CHECK(from <= last, "ember: random_ on ", type, " expects from < to ",
+              "once both are rounded to the dtype, got from=", from,
+              " to=", last + 1);
+  if (floating) {
+    if (!to.has_value()) {
+      ++last; // [from, 2^digits], the end included
+    }
+    // Warns, as on the CPU, for a bound beyond what the dtype holds exactly.
+    templates::check_from_to_in_range(from, last, self.dtype());
+  }
// ember-book: end random_integers.v1
