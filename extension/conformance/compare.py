"""How an ember result is compared with the CPU's.

A result must equal the CPU's within its dtype's tolerance (`tolerances`: assert_close's defaults,
slightly wider for float32/complex64). Two refinements keep the comparison fair:

- an op that draws random numbers (it calls an operator tagged nondeterministic_seeded) or returns
  uninitialized memory (`UNINITIALIZED_OUTPUTS`) is compared by shape, dtype and device only, since
  ember's generator is not the CPU's (`draws_random`, `Random`);
- a bfloat16 or float16 result that differs from the CPU's passes if its error against a float64
  computation of the same sample is at most twice the CPU's (`as_accurate_as_cpu`: both round; neither
  is exact). Such a pass is noted (`check`'s `loose`), so that the summary can also count the pairs
  equal to the CPU's at assert_close's default tolerances alone.

Nothing here imports torch at import time: the functions do, in the process that compares.
"""

from __future__ import annotations

import math
from typing import Any

DEVICE = "ember"
FORWARD_DTYPES = ("float32", "float64", "int64", "bool", "complex64", "bfloat16", "float16")
# The reduced-precision dtypes, also counted at assert_close's default tolerances alone.
LOW_PRECISION_DTYPES = ("bfloat16", "float16")
BACKWARD_DTYPE = "float64"

# Ops whose outputs are uninitialized memory: only shape, dtype and device can be compared.
UNINITIALIZED_OUTPUTS = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


# Ops whose saved statistics PyTorch's meta kernel gives every device but the CPU in CUDA's shape: in
# evaluation the CPU returns them empty, ember (the contracts chapter) and CUDA one per channel. PyTorch's own
# test_compare_cpu expects these ops to differ from the CPU; here only those outputs are left out.
CUDA_SHAPED_STATISTICS = frozenset({"native_batch_norm", "_native_batch_norm_legit"})


def without_device_shaped_statistics(op: Any, actual: Any, expected: Any) -> tuple[Any, Any]:
    """actual and expected as lists of results, less the statistics the CPU returns empty and ember
    one per channel (CUDA_SHAPED_STATISTICS); unchanged for every other op."""
    import torch

    if op.name not in CUDA_SHAPED_STATISTICS:
        return actual, expected
    a_leaves, e_leaves = leaves(actual), leaves(expected)
    if len(a_leaves) != len(e_leaves):
        return actual, expected
    kept = [
        (a, e)
        for a, e in zip(a_leaves, e_leaves, strict=True)
        if not (
            isinstance(e, torch.Tensor) and e.shape == (0,) and isinstance(a, torch.Tensor) and a.dim() == 1
        )
    ]
    return [a for a, _ in kept], [e for _, e in kept]


def tolerances(dtype: Any) -> tuple[float, float]:
    """(rtol, atol) for a result of `dtype`."""
    import torch

    # assert_close's defaults, slightly wider for float32/complex64: ember's own kernels may sum in
    # another order than the CPU's vectorized ones.
    if dtype in (torch.float32, torch.complex64):
        return 1e-5, 1e-5
    if dtype in (torch.float64, torch.complex128):
        return 1e-7, 1e-7
    if dtype == torch.bfloat16:
        return 1.6e-2, 1e-5
    if dtype == torch.float16:
        return 1e-3, 1e-5
    return 0.0, 0.0


def leaves(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(value)[0]


def first_line(error: BaseException) -> str:
    """An error's first non-empty line, with its type: what a failure is reported with."""
    text = f"{type(error).__name__}: {error}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]


def compare(actual: Any, expected: Any, metadata_only: bool) -> None:
    """Raise AssertionError if ember's result `actual` differs from the CPU's `expected`."""
    import torch

    a_leaves, e_leaves = leaves(actual), leaves(expected)
    if len(a_leaves) != len(e_leaves):
        raise AssertionError(f"{len(a_leaves)} results on {DEVICE}, {len(e_leaves)} on the CPU")
    for a, e in zip(a_leaves, e_leaves, strict=True):
        if isinstance(e, torch.Tensor):
            if not isinstance(a, torch.Tensor):
                raise AssertionError(f"a {type(a).__name__} on {DEVICE} where the CPU gives a tensor")
            if e.device.type == "cpu" and a.device.type != DEVICE:
                raise AssertionError(f"result on {a.device}, not on {DEVICE}")
            if a.dtype != e.dtype or a.shape != e.shape or a.layout != e.layout:
                raise AssertionError(
                    f"result {a.dtype} {tuple(a.shape)} {a.layout} on {DEVICE}, "
                    f"{e.dtype} {tuple(e.shape)} {e.layout} on the CPU"
                )
            if metadata_only:
                continue
            rtol, atol = tolerances(e.dtype)
            torch.testing.assert_close(
                a.detach().cpu(), e.detach(), rtol=rtol, atol=atol, equal_nan=True, check_device=False
            )
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e)) or math.isclose(a, e, rel_tol=1e-6)):
                raise AssertionError(f"{a} on {DEVICE}, {e} on the CPU")
        elif a != e:
            raise AssertionError(f"{a!r} on {DEVICE}, {e!r} on the CPU")


class _SeededOps:
    """A dispatch mode that notes whether any operator it sees draws random numbers."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                import torch

                if torch.Tag.nondeterministic_seeded in func.tags:
                    outer.seen = True
                return func(*args, **(kwargs or {}))

        self.seen = False
        self.mode = Mode()


def draws_random(op: Any, sample: Any) -> bool:
    """Whether op on this CPU sample calls an operator tagged nondeterministic_seeded."""
    seeded = _SeededOps()
    try:
        with seeded.mode:
            op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        pass  # some ops refuse dispatch modes: they are taken as not random
    return seeded.seen


class Random:
    """Whether an op was seen to draw random numbers: then only shape, dtype and device are compared.

    One per op, shared by its units in a worker: once seen, the op's later dtypes skip the values."""

    def __init__(self, seen: bool = False) -> None:
        self.seen = seen


def metadata_only(op: Any, found: Random) -> bool:
    """Whether op's results are compared by shape, dtype and device only."""
    return found.seen or op.name in UNINITIALIZED_OUTPUTS


def check(
    actual: Any, expected: Any, op: Any, sample: Any, found: Random, loose: list[str] | None = None
) -> None:
    """compare, and on a difference of values, whether the op draws random numbers on this sample: ember's
    own generator draws them on ember (as on CUDA, a seed does not give the CPU's numbers). A low-precision
    result that passes only as accurate as the CPU's has its difference noted in `loose`."""
    only_metadata = metadata_only(op, found)
    actual, expected = without_device_shaped_statistics(op, actual, expected)
    try:
        compare(actual, expected, only_metadata)
    except AssertionError as error:
        if not only_metadata and as_accurate_as_cpu(actual, expected, op, sample):
            if loose is not None:
                loose.append(first_line(error))
            return
        if only_metadata or not draws_random(op, sample):
            raise
        found.seen = True
        compare(actual, expected, True)


def as_accurate_as_cpu(actual: Any, expected: Any, op: Any, sample: Any) -> bool:
    """For bfloat16/float16 results that differ from the CPU's: whether ember's error against a float64
    computation of the same sample is at most twice the CPU's (plus one unit in the last place of the
    largest value). Both round differently (ember's kernels may accumulate in another order or precision);
    neither is the exact result, so the fair question is whether ember is as accurate."""
    import torch
    from torch.utils._pytree import tree_map

    lowp = (torch.bfloat16, torch.float16)
    if not any(isinstance(e, torch.Tensor) and e.dtype in lowp for e in leaves(expected)):
        return False

    def up(x: Any) -> Any:
        return x.detach().double() if isinstance(x, torch.Tensor) and x.dtype in lowp else x

    try:
        reference = op(tree_map(up, sample.input), *tree_map(up, sample.args), **tree_map(up, sample.kwargs))
        if op.name in CUDA_SHAPED_STATISTICS:  # as check() left them out of actual and expected
            reference = [
                r for r in leaves(reference) if not (isinstance(r, torch.Tensor) and r.shape == (0,))
            ]
        triples = list(zip(leaves(actual), leaves(expected), leaves(reference), strict=True))
    except Exception:
        return False
    for a, e, r in triples:
        if not isinstance(e, torch.Tensor) or e.dtype not in lowp:
            if isinstance(e, torch.Tensor):
                compare(a, e, False)
            continue
        if a.shape != e.shape or a.dtype != e.dtype or not isinstance(r, torch.Tensor) or r.shape != e.shape:
            return False
        a64, e64, r64 = a.detach().cpu().double(), e.double(), r.detach().cpu().double()
        finite = torch.isfinite(r64)
        if not torch.equal(torch.isfinite(a64), finite):
            return False
        if not finite.any():
            continue
        ulp = r64[finite].abs().max().item() * torch.finfo(e.dtype).eps
        ember_error = (a64 - r64)[finite].abs().max().item()
        cpu_error = (e64 - r64)[finite].abs().max().item()
        if ember_error > 2 * cpu_error + ulp:
            return False
    return True
