// Earlier versions of parts that chapter 08 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
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
