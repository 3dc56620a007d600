"""The allocator chapter's versions of the device module's Python that later chapters replace.

The book shows these (its `%%py` cells); the package has the latest versions only. Each region
NAME.vK stores only what differs from the next stored version of NAME (a later NAME.vJ, else
the package's region NAME), as comment lines: hunks `@@ -a,b +c,d @@ sha256:...` that replace
b lines of it from line a (their checksum given) with this version's `+` lines. The chapter's
cells hold every version in full, and `python -m book.sync --check` derives each one and
compares them (book/parts/regions.py). Not part of the package: nothing imports this file. A version
recorded here in full (before `python -m book.sync --compact-history`) names the package's
functions without importing them.
"""

# ruff: noqa: F821

# ember-book: begin memory.v1
# @@ -7,31 +6,0 @@ sha256:ded6346b1b
# @@ -39,3 +8,2 @@ sha256:82e4c559fd
# +    """Bytes of device memory held by live ember storages on `device`."""
# +    return driver_memory_stats(device).bytes_in_use
# @@ -47,1 +15,7 @@ sha256:7618aa81f3
# +    return driver_memory_stats(device).peak_bytes_in_use
# +
# +
# +def reset_peak_memory_stats(device: DeviceLike = None) -> None:
# +    """Reset the peak that `max_memory_allocated(device)` reports to the current
# +    usage."""
# +    _the_driver().reset_peak(_device_index(device))
# @@ -51,26 +25,3 @@ sha256:0d688bd9fe
# +    """Bytes reserved from the driver: equal to `memory_allocated`, since nothing is
# +    cached."""
# +    return memory_allocated(device)
# @@ -80,16 +31,2 @@ sha256:ae863703c3
# +    """Release cached device memory: nothing to do, every free goes straight to the
# +    driver."""
# ember-book: end memory.v1


# ember-book: begin bad_fork.v1
# @@ -2,5 +2,2 @@ sha256:1ee2ff1877
# +    # Unlike CUDA's, ember's driver state is ordinary process memory, which fork copies
# +    # intact. (torch.manual_seed asks before it seeds the device.)
# ember-book: end bad_fork.v1
