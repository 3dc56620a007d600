"""The compile chapter's versions of the package's compiler Python that later chapters replace.

The book shows these (its `%%py` cells); the package has the latest versions only. Each region
NAME.vK stores only what differs from the next stored version of NAME (a later NAME.vJ, else
the package's region NAME), as comment lines: hunks `@@ -a,b +c,d @@ sha256:...` that replace
b lines of it from line a (their checksum given) with this version's `+` lines. The chapter's
cells hold every version in full, and `python -m book.sync --check` derives each one and
compares them (book/parts/regions.py). Not part of the package: nothing imports this file. A version
recorded here in full (before `python -m book.sync --compact-history`) names the package's
functions without importing them.
"""


# ember-book: begin inductor_backend.v1
# @@ -3,6 +2,0 @@ sha256:a89190d309
# @@ -73,9 +66,0 @@ sha256:8979f24e11
# @@ -119,0 +105,9 @@
# +    # A fusion step that reindexes a pointwise node to a reduction's loops is not
# +    # validated for C++ kernels; Inductor skips it for device type "cpu" only.
# +    inductor_config.loop_reindexing_after_fusion = False
# +    # The wrapper names a graph's streams (`with stream1:`) inside a device guard,
# +    # which Inductor writes for GPU types only: ember gets one in graphs that use
# +    # streams. The C++ wrapper's guard is a C shim ember does not have.
# +    gpu_rule = inductor_scheduler.device_need_guard
# +    if not getattr(gpu_rule, "ember", False):
# +        inductor_scheduler.device_need_guard = _guard_streams_on_ember(gpu_rule)
# @@ -122,3 +116,6 @@ sha256:880960ba4e
# +def _guard_streams_on_ember(gpu_rule: Callable[[str], bool]) -> Callable[[str], bool]:
# +    def need_guard(device: str) -> bool:
# +        if device != "ember":
# +            return gpu_rule(device)
# +        graph = V.graph
# +        return not graph.cpp_wrapper and graph.scheduler._has_multi_stream_nodes()
# @@ -126,57 +123,2 @@ sha256:5443d010ba
# +    need_guard.ember = True  # type: ignore[attr-defined]
# +    return need_guard
# ember-book: end inductor_backend.v1
