"""ember's conformance sweep: every operator of PyTorch's OpInfo database, run on ember and on the CPU.

A folder of tools beside the package, not part of the installed torch_ember (extension/README.md says
why). Its modules, by job:

- compare.py: how an ember result is compared with the CPU's (tolerances, random and uninitialized
  outputs compared by shape and dtype, the low-precision second chance and the default-tolerance count);
- run.py: sampling op_db, chunks in worker processes, crash accounting, resuming after a crash;
- reasons.py: why a unit may fail (REASONS), matching a failure to its reason, reading the
  expected-failures file;
- report.py: the summary JSON, its printout, and the expected-failures file's writer;
- strides.py: the stride sweep, every ATen call of op_db's samples (as sampled, non-contiguous,
  channels-last) and of transformer and vision model cases on ember against FakeTensor's prediction of
  its sizes and strides; strides_report.py: its summary, its reasons and expected-differences file.
- pytorch_suites.py: PyTorch's own shape, sort/select, scatter/gather, view, indexing and reduction
  test files (not in the wheel, not in this repository: its docstring says where to get them), run on
  ember and on the CPU, with the failures only ember has and why.

The committed results live here too: opinfo_summary.json (the counts the capstone chapter shows) and
opinfo_expected_failures.toml (every expected failure with its reason), both written by
`make conformance` and checked by tests/package/test_ember_opinfo.py; strides_summary.json and
strides_expected.toml, the stride sweep's, checked by tests/package/test_ember_strides.py. Run it as

    python extension/conformance --json extension/conformance/opinfo_summary.json   # the CI sweep
    EMBER_FULL_SWEEP=1 python extension/conformance                                  # more samples per pair
    python extension/conformance --strides --json extension/conformance/strides_summary.json  # strides

or import it with extension/ on sys.path (appended, so that the installed torch_ember, not its
sources, is the one imported): `from conformance import report, run`. Importing it imports neither
torch_ember nor torch.testing._internal; the worker processes do.
"""
