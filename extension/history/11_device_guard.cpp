// Earlier versions of parts that chapter 11 shows and a later cell revises. Not part of the
// torch_ember package, and not C++ to compile: each region NAME.vK stores only what differs from
// the next stored version of NAME (a later NAME.vJ, else the package's region NAME), as hunks
// `@@ -a,b +c,d @@ sha256:...` that replace b lines of it from line a (their checksum given)
// with this version's `+` lines; a version identical to the next one is not stored. The
// chapter's cells hold every version in full, and `python -m book.sync --check` derives each
// one and compares them (book/regions.py, book/sync.py). To record a revision, paste the
// current text here in full as NAME.vK, edit the package's region, then run
// `python -m book.sync --compact-history`.

// ember-book: begin allocator.v2
@@ -16,2 +15,0 @@ sha256:57b0e9c843
@@ -62,1 +60,1 @@ sha256:6c4cb393a4
+    void* ptr = cacheAllocate(nbytes, device, stream);
// ember-book: end allocator.v2
