"""Conformance sweep: every operator of PyTorch's OpInfo database, run on ember and on the CPU.

For each OpInfo with samples, and each dtype of FORWARD_DTYPES that the CPU supports for it, a few
seeded samples run on the CPU and, copied, on ember; the results must agree within the dtype's
tolerance. For each OpInfo that supports autograd, float64 samples also run backward on both devices
and the input gradients must agree. Two refinements keep the comparison fair: an op that draws random
numbers (it calls an operator tagged nondeterministic_seeded) or returns uninitialized memory is
compared by shape, dtype and device only, since ember's generator is not the CPU's; and a bfloat16 or
float16 result that differs from the CPU's passes if its error against a float64 computation of the
same sample is at most twice the CPU's (both round; neither is exact). The summary also counts, for
bfloat16 and float16, the pairs equal to the CPU's at torch.testing.assert_close's default
tolerances alone (`default_tolerance`), without that second chance.

The ops are split into chunks; each chunk runs in its own worker process, two at a time, so a crash
(a signal, or a hang past IDLE_TIMEOUT) is counted against the (op, dtype) pair that was running and
the chunk resumes after it. Run as a script:

    python tests/extension/opinfo_sweep.py --json summary.json        # the CI sweep
    EMBER_FULL_SWEEP=1 python tests/extension/opinfo_sweep.py         # more samples per pair

The summary (counts, failures with their first error line; no timings, so that a re-run on another
machine writes the same file) goes to `--json PATH`; the
test (`test_ember_opinfo.py`) compares the failures with `opinfo_expected_failures.toml`, which
`--write-expected PATH` regenerates, grouped by reason (REASONS).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEVICE = "ember"
FORWARD_DTYPES = ("float32", "float64", "int64", "bool", "complex64", "bfloat16", "float16")
# The reduced-precision dtypes, also counted at assert_close's default tolerances alone.
LOW_PRECISION_DTYPES = ("bfloat16", "float16")
BACKWARD_DTYPE = "float64"
# Samples per (op, dtype): the first ones an OpInfo yields under a fixed seed. The CI sweep must stay
# under 150 s wall on 2 cores; EMBER_FULL_SWEEP=1 takes more.
CI_SAMPLES = 2
FULL_SAMPLES = 8
CHUNKS = 8
PARALLEL = 2
# A worker that writes no result for this long is hung: it is killed and its pair counted as a crash.
IDLE_TIMEOUT = 60.0
# For the sweep's own tests: only these ops (comma-separated names), and a unit whose worker aborts.
ONLY_ENV = "EMBER_SWEEP_ONLY"
ABORT_ENV = "EMBER_SWEEP_ABORT_AT"

# Ops whose outputs are uninitialized memory: only shape, dtype and device can be compared.
UNINITIALIZED_OUTPUTS = frozenset(
    {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}
)


@dataclass
class Result:
    """The outcome of one (kind, op, dtype) unit: kind is "forward" or "backward"."""

    kind: str
    op: str
    dtype: str
    status: str  # "pass", "fail", "crash", or "skip" (no sample ran on the CPU)
    detail: str = ""
    metadata_only: bool = False  # random or uninitialized outputs: shape, dtype and device compared
    seconds: float = 0.0
    # Passed only by the low-precision second chance (_as_accurate_as_cpu): the first difference at
    # assert_close's default tolerances. Empty if every sample is within them.
    loose: str = ""

    @property
    def key(self) -> str:
        return unit_key(self.kind, self.op, self.dtype)


def unit_key(kind: str, op: str, dtype: str) -> str:
    return f"{kind} {op} {dtype}"


# ---------------------------------------------------------------------------------------------------
# The worker: runs in its own process, imports torch (which autoloads torch_ember) and the OpInfos.
# ---------------------------------------------------------------------------------------------------


def _op_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _seed_for(*parts: str) -> int:
    """A stable seed per unit, so that a chunk's results do not depend on what ran before it."""
    return zlib.crc32(" ".join(parts).encode())


def _tolerances(dtype: Any) -> tuple[float, float]:
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


def _move_tensor(x: Any, device: str) -> Any:
    """x copied to `device` with its storage: a view keeps its offset and strides over a copy of the whole
    storage, because some samples (as_strided's) read memory outside the view."""
    import torch

    x = x.detach()
    if x.layout != torch.strided:
        return x.to(device)  # sparse layouts: ember has none, and the error says so
    elements = x.untyped_storage().nbytes() // max(x.element_size(), 1)
    if x.is_contiguous() and x.storage_offset() == 0 and elements == x.numel():
        return x.to(device)
    whole = torch.as_strided(x, (elements,), (1,), 0).to(device)
    return whole.as_strided(x.shape, x.stride(), x.storage_offset())


def _to_device(value: Any, template: Any, device: str, keep_grad: bool) -> Any:
    """A sample's values for `device`: its tensors copied there (new leaves; requires_grad kept if
    keep_grad) and its device arguments naming it.

    `template` is the same sample generated for the meta device (or None): a tensor that is a CPU tensor
    there too stays on the CPU (tensor_split's indices must), and only the device names that read "meta"
    there are changed.
    """
    import torch
    from torch.utils._pytree import tree_flatten, tree_unflatten

    leaves, spec = tree_flatten(value)
    shape_leaves = tree_flatten(template)[0] if template is not None else None
    if shape_leaves is not None and len(shape_leaves) != len(leaves):
        shape_leaves = None
    moved = []
    for index, x in enumerate(leaves):
        twin = shape_leaves[index] if shape_leaves is not None else None
        if isinstance(x, torch.Tensor):
            if isinstance(twin, torch.Tensor) and twin.device.type == "cpu":
                y = x.detach().clone()
            else:
                y = _move_tensor(x, device)
            moved.append(y.requires_grad_(x.requires_grad) if keep_grad and x.requires_grad else y)
        elif isinstance(x, torch.device) and x.type == "cpu":
            keep = isinstance(twin, torch.device) and twin.type == "cpu"
            moved.append(x if keep else torch.device(device))
        elif isinstance(x, str) and x == "cpu":
            moved.append(x if twin == "cpu" else device)
        else:
            moved.append(x)
    return tree_unflatten(moved, spec)


class _Samples:
    """The first `count` samples of an op in a dtype, generated on the CPU under a fixed seed, and (only
    when asked) the same samples generated for the meta device, to tell device-dependent values apart."""

    def __init__(self, op: Any, dtype: Any, requires_grad: bool, count: int, seed: int) -> None:
        import torch

        self.op, self.dtype, self.requires_grad, self.count = op, dtype, requires_grad, count
        torch.manual_seed(seed)
        self.cpu = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=requires_grad), count))
        self._meta: list[Any] | None = None

    def twin(self, index: int) -> Any:
        """(input, args, kwargs) of the meta sample `index`, or None if the meta samples differ."""
        if self._meta is None:
            try:
                self._meta = list(
                    itertools.islice(
                        self.op.sample_inputs("meta", self.dtype, requires_grad=self.requires_grad),
                        self.count,
                    )
                )
            except Exception:
                self._meta = []
        if len(self._meta) != len(self.cpu):
            return None
        twin = self._meta[index]
        return (twin.input, twin.args, twin.kwargs)


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


def _leaves(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_flatten

    return tree_flatten(value)[0]


def _compare(actual: Any, expected: Any, metadata_only: bool) -> None:
    """Raise AssertionError if ember's result `actual` differs from the CPU's `expected`."""
    import torch

    a_leaves, e_leaves = _leaves(actual), _leaves(expected)
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
            rtol, atol = _tolerances(e.dtype)
            torch.testing.assert_close(
                a.detach().cpu(), e.detach(), rtol=rtol, atol=atol, equal_nan=True, check_device=False
            )
        elif isinstance(e, float) and isinstance(a, float):
            if not (a == e or (math.isnan(a) and math.isnan(e)) or math.isclose(a, e, rel_tol=1e-6)):
                raise AssertionError(f"{a} on {DEVICE}, {e} on the CPU")
        elif a != e:
            raise AssertionError(f"{a!r} on {DEVICE}, {e!r} on the CPU")


def _first_line(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".strip()
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if lines else type(error).__name__)[:300]


def _retrying(samples: _Samples, index: int, attempt: Callable[[Any], None]) -> None:
    """attempt(template) with every tensor moved to ember; if that fails, once more with the tensors the
    meta samples keep on the CPU left there. The first error is raised if both fail."""
    try:
        attempt(None)
    except Exception as first:
        twin = samples.twin(index)
        if twin is None:
            raise
        try:
            attempt(twin)
        except Exception:
            raise first from None


def _draws_random(op: Any, sample: Any) -> bool:
    """Whether op on this CPU sample calls an operator tagged nondeterministic_seeded."""
    seeded = _SeededOps()
    try:
        with seeded.mode:
            op(sample.input, *sample.args, **sample.kwargs)
    except Exception:
        pass  # some ops refuse dispatch modes: they are taken as not random
    return seeded.seen


@dataclass
class _Random:
    """Whether an op was seen to draw random numbers: then only shape, dtype and device are compared."""

    seen: bool = False


def _check(
    actual: Any, expected: Any, op: Any, sample: Any, found: _Random, loose: list[str] | None = None
) -> None:
    """_compare, and on a difference of values, whether the op draws random numbers on this sample: ember's
    own generator draws them on ember (as on CUDA, a seed does not give the CPU's numbers). A low-precision
    result that passes only as accurate as the CPU's has its difference noted in `loose`."""
    metadata_only = found.seen or op.name in UNINITIALIZED_OUTPUTS
    try:
        _compare(actual, expected, metadata_only)
    except AssertionError as error:
        if not metadata_only and _as_accurate_as_cpu(actual, expected, op, sample):
            if loose is not None:
                loose.append(_first_line(error))
            return
        if metadata_only or not _draws_random(op, sample):
            raise
        found.seen = True
        _compare(actual, expected, True)


def _as_accurate_as_cpu(actual: Any, expected: Any, op: Any, sample: Any) -> bool:
    """For bfloat16/float16 results that differ from the CPU's: whether ember's error against a float64
    computation of the same sample is at most twice the CPU's (plus one unit in the last place of the
    largest value). Both round differently (ember's kernels may accumulate in another order or precision);
    neither is the exact result, so the fair question is whether ember is as accurate."""
    import torch
    from torch.utils._pytree import tree_map

    lowp = (torch.bfloat16, torch.float16)
    if not any(isinstance(e, torch.Tensor) and e.dtype in lowp for e in _leaves(expected)):
        return False

    def up(x: Any) -> Any:
        return x.detach().double() if isinstance(x, torch.Tensor) and x.dtype in lowp else x

    try:
        reference = op(tree_map(up, sample.input), *tree_map(up, sample.args), **tree_map(up, sample.kwargs))
        leaves = list(zip(_leaves(actual), _leaves(expected), _leaves(reference), strict=True))
    except Exception:
        return False
    for a, e, r in leaves:
        if not isinstance(e, torch.Tensor) or e.dtype not in lowp:
            if isinstance(e, torch.Tensor):
                _compare(a, e, False)
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


def _run_forward(
    op: Any, dtype: Any, count: int, found: _Random, loose: list[str] | None = None
) -> tuple[str, str]:
    """(status, detail) of op's forward on ember vs the CPU in `dtype` (see _check for `loose`)."""
    import torch

    name = _op_name(op)
    samples = _Samples(op, dtype, False, count, _seed_for(name, str(dtype)))
    ran = 0
    for index, sample in enumerate(samples.cpu):
        try:
            torch.manual_seed(1)
            expected = op(sample.input, *sample.args, **sample.kwargs)
        except Exception:
            continue  # the sample is invalid on the CPU too
        ran += 1

        def attempt(template: Any, sample: Any = sample, expected: Any = expected) -> None:
            ember_input, ember_args, ember_kwargs = _to_device(
                (sample.input, sample.args, sample.kwargs), template, DEVICE, keep_grad=False
            )
            torch.manual_seed(1)
            actual = op(ember_input, *ember_args, **ember_kwargs)
            _check(actual, expected, op, sample, found, loose)

        try:
            _retrying(samples, index, attempt)
        except Exception as error:
            return "fail", f"sample {ran - 1}: {_first_line(error)}"
    if ran == 0:
        return "skip", "no sample runs on the CPU"
    return "pass", ""


def _differentiable(outputs: Any) -> list[Any]:
    import torch

    return [
        t
        for t in _leaves(outputs)
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def _run_backward(op: Any, count: int, found: _Random) -> tuple[str, str]:
    """(status, detail) of the input gradients of op's float64 samples on ember vs the CPU."""
    import torch

    name = _op_name(op)
    samples = _Samples(op, torch.float64, True, count, _seed_for(name, "backward"))
    ran = 0
    for index, sample in enumerate(samples.cpu):
        cpu_leaves = _leaves((sample.input, sample.args, sample.kwargs))
        wanted = [i for i, t in enumerate(cpu_leaves) if isinstance(t, torch.Tensor) and t.requires_grad]
        if not wanted:
            continue
        try:
            torch.manual_seed(1)
            cpu_out = _differentiable(
                sample.output_process_fn_grad(op(sample.input, *sample.args, **sample.kwargs))
            )
            if not cpu_out:
                continue
            generator = torch.Generator().manual_seed(_seed_for(name, "grad_outputs", str(index)))
            grad_outputs = [torch.randn(t.shape, dtype=t.dtype, generator=generator) for t in cpu_out]
            expected = torch.autograd.grad(
                cpu_out, [cpu_leaves[i] for i in wanted], grad_outputs, allow_unused=True
            )
        except Exception:
            continue
        ran += 1

        def attempt(
            template: Any,
            sample: Any = sample,
            expected: Any = expected,
            grads: Any = grad_outputs,
            wanted: list[int] = wanted,
        ) -> None:
            moved = _to_device((sample.input, sample.args, sample.kwargs), template, DEVICE, keep_grad=True)
            ember_leaves = _leaves(moved)
            ember_input, ember_args, ember_kwargs = moved
            torch.manual_seed(1)
            ember_out = _differentiable(
                sample.output_process_fn_grad(op(ember_input, *ember_args, **ember_kwargs))
            )
            if len(ember_out) != len(grads):
                raise AssertionError(
                    f"{len(ember_out)} differentiable outputs on {DEVICE}, {len(grads)} on the CPU"
                )
            actual = torch.autograd.grad(
                ember_out, [ember_leaves[i] for i in wanted], [g.to(DEVICE) for g in grads], allow_unused=True
            )
            for a, e in zip(actual, expected, strict=True):
                if (a is None) != (e is None):
                    raise AssertionError(f"gradient {'missing' if a is None else 'present'} on {DEVICE}")
                if a is not None:
                    _check(a, e, op, sample, found)

        try:
            _retrying(samples, index, attempt)
        except Exception as error:
            return "fail", f"sample {ran - 1}: {_first_line(error)}"
    if ran == 0:
        return "skip", "no differentiable sample runs on the CPU"
    return "pass", ""


def _units(chunk: int, chunks: int) -> Iterator[tuple[Any, str, Any]]:
    """(op, kind, torch dtype) for the ops of one chunk (round robin over op_db, for balance)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    only = set(filter(None, os.environ.get(ONLY_ENV, "").split(",")))
    for index, op in enumerate(op_db):
        if index % chunks != chunk or (only and _op_name(op) not in only):
            continue
        supported = op.supported_dtypes("cpu")
        for dtype_name in FORWARD_DTYPES:
            dtype = getattr(torch, dtype_name)
            if dtype in supported:
                yield op, "forward", dtype
        if op.supports_autograd and torch.float64 in supported:
            yield op, "backward", torch.float64


def worker(chunk: int, chunks: int, samples: int, resume_after: str | None, out: Path) -> None:
    """Run one chunk, appending one JSON line per unit to `out` ("start" first, then the result)."""
    import warnings

    import torch
    import torch_ember  # noqa: F401 (loads the backend when autoload is off)

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)  # two workers share two cores
    random_ops: dict[str, _Random] = {}
    skipping = resume_after is not None
    with out.open("a", encoding="utf-8") as stream:

        def emit(record: dict[str, Any]) -> None:
            stream.write(json.dumps(record) + "\n")
            stream.flush()

        for op, kind, dtype in _units(chunk, chunks):
            name, dtype_name = _op_name(op), str(dtype).removeprefix("torch.")
            key = unit_key(kind, name, dtype_name)
            if skipping:
                skipping = key != resume_after
                continue
            emit({"start": key})
            if os.environ.get(ABORT_ENV) == key:
                os.abort()  # the crash the tests make on purpose: the driver must count it and go on
            started = time.perf_counter()
            found = random_ops.setdefault(name, _Random())
            loose: list[str] = []
            try:
                if kind == "forward":
                    status, detail = _run_forward(op, dtype, samples, found, loose)
                else:
                    status, detail = _run_backward(op, samples, found)
            except Exception as error:  # the sweep's own code failed around the op: a failure, with why
                status, detail = "fail", f"sweep: {_first_line(error)}"
            emit(
                {
                    "kind": kind,
                    "op": name,
                    "dtype": dtype_name,
                    "status": status,
                    "detail": detail,
                    "metadata_only": found.seen or op.name in UNINITIALIZED_OUTPUTS,
                    "seconds": round(time.perf_counter() - started, 3),
                    "loose": loose[0] if loose and status == "pass" else "",
                }
            )


# ---------------------------------------------------------------------------------------------------
# The driver: runs the chunks in worker processes and gathers their results.
# ---------------------------------------------------------------------------------------------------


@dataclass
class Summary:
    samples: int
    results: list[Result] = field(default_factory=list)
    wall_seconds: float = 0.0

    def of(self, kind: str, status: str | None = None) -> list[Result]:
        return [
            r for r in self.results if r.kind == kind and r.status != "skip" and status in (None, r.status)
        ]

    def to_json(self) -> dict[str, Any]:
        forward, backward = self.of("forward"), self.of("backward")
        passed_fwd, passed_bwd = self.of("forward", "pass"), self.of("backward", "pass")
        return {
            "device": DEVICE,
            "samples_per_pair": self.samples,
            "forward_dtypes": list(FORWARD_DTYPES),
            "forward": {
                "passed": len(passed_fwd),
                "total": len(forward),
                "percent": round(100 * len(passed_fwd) / max(len(forward), 1), 2),
                "metadata_only": sum(r.metadata_only for r in passed_fwd),
                "by_dtype": {
                    d: {
                        "passed": sum(r.dtype == d for r in passed_fwd),
                        "total": sum(r.dtype == d for r in forward),
                    }
                    for d in FORWARD_DTYPES
                },
            },
            "backward": {
                "passed": len(passed_bwd),
                "total": len(backward),
                "percent": round(100 * len(passed_bwd) / max(len(backward), 1), 2),
                "metadata_only": sum(r.metadata_only for r in passed_bwd),
            },
            # Ops whose values cannot agree (random draws, uninitialized memory): shape, dtype, device compared.
            "metadata_only_ops": sorted(
                {r.op for r in self.results if r.metadata_only and r.status != "skip"}
            ),
            "crashes": sum(r.status == "crash" for r in self.results),
            "skipped": sum(r.status == "skip" for r in self.results),
            "failures": {r.key: r.detail for r in self.results if r.status in ("fail", "crash")},
            # The bfloat16 and float16 counts above give a result that differs from the CPU's a second
            # chance (as accurate as the CPU's against float64); these count the pairs equal to the
            # CPU's at assert_close's default tolerances alone, and name the ops that are not.
            "default_tolerance": {
                d: {
                    "passed": sum(r.dtype == d and not r.loose for r in passed_fwd),
                    "total": sum(r.dtype == d for r in forward),
                    "loose": sorted(r.op for r in passed_fwd if r.dtype == d and r.loose),
                }
                for d in LOW_PRECISION_DTYPES
            },
        }


def _read_records(path: Path) -> tuple[list[Result], str | None]:
    """The results in a worker's output, and the unit it started without finishing (if any)."""
    results: list[Result] = []
    pending: str | None = None
    if not path.exists():
        return results, pending
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        if "start" in record:
            pending = record["start"]
        elif "done" in record:  # a unit closed by the driver after its worker crashed
            pending = None
        else:
            results.append(
                Result(
                    record["kind"],
                    record["op"],
                    record["dtype"],
                    record["status"],
                    record["detail"],
                    record["metadata_only"],
                    record["seconds"],
                    record.get("loose", ""),
                )
            )
            pending = None
    return results, pending


@dataclass
class _Chunk:
    index: int
    out: Path
    resume_after: str | None = None
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    crashes: list[Result] = field(default_factory=list)
    last_size: int = -1
    last_progress: float = 0.0

    def start(self, chunks: int, samples: int) -> None:
        command = [sys.executable, __file__, "--worker", str(self.index), "--chunks", str(chunks)]
        command += ["--samples", str(samples), "--out", str(self.out)]
        if self.resume_after is not None:
            command += ["--resume-after", self.resume_after]
        self.process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={**os.environ, **(self.env or {})},
        )
        self.last_size, self.last_progress = -1, time.monotonic()

    def poll(self, chunks: int, samples: int) -> bool:
        """True while the chunk still runs. A crash or hang is recorded and the chunk resumed."""
        assert self.process is not None
        code = self.process.poll()
        size = self.out.stat().st_size if self.out.exists() else 0
        if size != self.last_size:
            self.last_size, self.last_progress = size, time.monotonic()
        hung = code is None and time.monotonic() - self.last_progress > IDLE_TIMEOUT
        if code is None and not hung:
            return True
        if hung:
            self.process.kill()
            self.process.wait()
        _, pending = _read_records(self.out)
        if pending is None:
            return False  # finished (a crash after the last unit has nothing to count)
        kind, op, dtype = pending.split(" ")
        reason = "hung" if hung else f"exit code {code}"
        self.crashes.append(Result(kind, op, dtype, "crash", f"worker process: {reason}"))
        with self.out.open("a", encoding="utf-8") as stream:  # close the unit, then resume after it
            stream.write(json.dumps({"done": pending}) + "\n")
        self.resume_after = pending
        self.start(chunks, samples)
        return True


def run_sweep(
    samples: int, chunks: int = CHUNKS, parallel: int = PARALLEL, env: dict[str, str] | None = None
) -> Summary:
    """Run every chunk in worker processes, `parallel` at a time (`env`: extra environment for them)."""
    started = time.perf_counter()
    summary = Summary(samples)
    with tempfile.TemporaryDirectory(prefix="ember-opinfo-") as tmp:
        waiting = [_Chunk(i, Path(tmp) / f"chunk{i}.jsonl", env=env) for i in range(chunks)]
        running: list[_Chunk] = []
        done: list[_Chunk] = []
        while waiting or running:
            while waiting and len(running) < parallel:
                chunk = waiting.pop(0)
                chunk.start(chunks, samples)
                running.append(chunk)
            time.sleep(0.2)
            still = [c for c in running if c.poll(chunks, samples)]
            done += [c for c in running if c not in still]
            running = still
        for chunk in sorted(done, key=lambda c: c.index):
            results, _ = _read_records(chunk.out)
            summary.results += results + chunk.crashes
    summary.wall_seconds = time.perf_counter() - started
    return summary


# Why an (op, dtype) may fail, matched against "UNIT KEY: first line of its error": the classes the
# expected-failures file groups its entries under (`--write-expected`). A failure no pattern matches is
# left for a person.
REASONS: dict[str, tuple[str, str]] = {
    "sparse": (
        r"'Sparse(Csr)?ember' backend",
        "Sparse layouts are not supported on ember. The only kernels at SparsePrivateUse1 and "
        "SparseCsrPrivateUse1 are chapter 02's empty.memory_format, which refuses a sparse layout with a "
        "clear error; every other sparse operator has no kernel there (the error names the 'Sparseember' "
        "backend), so a sparse tensor cannot be made on or moved to ember. Out of the book's scope, like "
        "on many accelerator backends.",
    ),
    "convolution": (
        r"convolution_overrideable",
        "ember's convolution computes 2-D, non-transposed convolutions of floating-point tensors; transposed, "
        "1-D/3-D shapes it does not handle and integer or complex inputs raise a clear error naming the case.",
    ),
    "dtype_not_compiled": (
        r"has no ember kernel for \w+ tensors|supports float32, float64 and int64 tensors, got",
        "An ember kernel exists for the operator but its loops are not compiled for this dtype (chapter 04 "
        "keeps the list short on purpose), and it raises rather than compute on the CPU behind the user's back.",
    ),
    "complex_conjugate_views": (
        r"^(forward cov complex64|backward linalg\.eig float64):",
        "ember's complex matrix products read a lazily conjugated view (`.conj()`, `.mH`: is_conj()) as if "
        "it were not conjugated, so cov's values and linalg.eig's backward (whose phase check then raises) "
        "are wrong. A bug in the chapter 12 BLAS kernels, reported; not a tolerance matter.",
    ),
}


def classify(key: str, detail: str) -> str | None:
    import re

    for reason, (pattern, _why) in REASONS.items():
        if re.search(pattern, f"{key}: {detail}"):
            return reason
    return None


def write_expected(failures: dict[str, str], path: Path) -> list[str]:
    """Write the expected-failures file for `failures` (unit key -> detail); return the unclassified keys."""
    grouped: dict[str, list[str]] = {reason: [] for reason in REASONS}
    unclassified = []
    for key, detail in sorted(failures.items()):
        reason = classify(key, detail)
        if reason is None:
            unclassified.append(key)
        else:
            grouped[reason].append(key)
    lines = [
        "# Expected failures of the OpInfo sweep (opinfo_sweep.py), checked by test_ember_opinfo.py: every",
        "# failure must be listed here, and a listed one that passes fails the test (remove it then).",
        '# `forward` entries are "OP DTYPE"; `backward` entries are ops (float64 input gradients).',
        "# Generated by `python tests/extension/opinfo_sweep.py --write-expected PATH`, which groups failures",
        "# by their error (the reasons and their texts: REASONS in opinfo_sweep.py).",
    ]
    for reason, keys in grouped.items():
        if not keys:
            continue
        forward = [k.split(" ", 1)[1] for k in keys if k.startswith("forward ")]
        backward = [k.split(" ")[1] for k in keys if k.startswith("backward ")]
        lines += ["", f"[{reason}]", f"why = {json.dumps(REASONS[reason][1])}"]
        lines += ["forward = ["] + [f"  {json.dumps(f)}," for f in forward] + ["]"]
        lines += ["backward = ["] + [f"  {json.dumps(b)}," for b in backward] + ["]"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return unclassified


def default_samples() -> int:
    return FULL_SAMPLES if os.environ.get("EMBER_FULL_SWEEP") == "1" else CI_SAMPLES


def _print_summary(data: dict[str, Any], out: Callable[[str], None] = print) -> None:
    fwd, bwd = data["forward"], data["backward"]
    out(f"forward  (op, dtype) pairs: {fwd['passed']}/{fwd['total']} equal the CPU's ({fwd['percent']} %)")
    for dtype, counts in fwd["by_dtype"].items():
        out(f"  {dtype:<10} {counts['passed']}/{counts['total']}")
    out(f"backward ops (float64):    {bwd['passed']}/{bwd['total']} ({bwd['percent']} %)")
    for dtype, counts in data["default_tolerance"].items():
        out(
            f"  {dtype:<10} {counts['passed']}/{counts['total']} at assert_close's default tolerances "
            f"alone ({len(counts['loose'])} ops only as accurate as the CPU)"
        )
    out(f"crashes: {data['crashes']}; samples per pair: {data['samples_per_pair']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--samples", type=int, default=None, help="samples per (op, dtype)")
    parser.add_argument("--chunks", type=int, default=CHUNKS)
    parser.add_argument("--parallel", type=int, default=PARALLEL)
    parser.add_argument("--failures", action="store_true", help="print every failure")
    parser.add_argument("--write-expected", type=Path, help="write the expected-failures file for this run")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--resume-after", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    samples = args.samples if args.samples is not None else default_samples()
    if args.worker is not None:
        worker(args.worker, args.chunks, samples, args.resume_after, args.out)
        return 0
    summary = run_sweep(samples, args.chunks, args.parallel)
    data = summary.to_json()
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    _print_summary(data)
    print(f"wall time: {summary.wall_seconds:.1f} s")
    if args.failures:
        for key, detail in sorted(data["failures"].items()):
            print(f"{key}: {detail}")
    if args.write_expected:
        unclassified = write_expected(data["failures"], args.write_expected)
        for key in unclassified:
            print(f"not written (no reason matches; decide by hand): {key}: {data['failures'][key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
