"""Running the sweep: op_db sampled, chunks of it in worker processes, crashes counted, chunks resumed.

For each OpInfo with samples, and each dtype of FORWARD_DTYPES that the CPU supports for it, a few
seeded samples run on the CPU and, copied, on ember (`run_forward`); for each OpInfo that supports
autograd, float64 samples also run backward on both devices (`run_backward`). compare.py judges the
results.

The ops are split into chunks (round robin over op_db); each chunk runs in its own worker process,
PARALLEL at a time (`run_sweep`), so a crash (a signal, or a hang past IDLE_TIMEOUT) is counted against
the (op, dtype) unit that was running and the chunk resumes after it. A worker writes one JSON line per
unit: {"start": KEY} before it, the result after.

Only the workers import torch_ember and torch.testing._internal: the process that calls run_sweep
imports neither (the capstone chapter calls it from a process that holds its own backend).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .compare import DEVICE, FORWARD_DTYPES, Random, check, first_line, leaves, metadata_only
from .reasons import unit_key

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
# The command line a worker runs (`python extension/conformance ...`, see __main__.py).
ENTRY = Path(__file__).resolve().with_name("__main__.py")


def default_samples() -> int:
    return FULL_SAMPLES if os.environ.get("EMBER_FULL_SWEEP") == "1" else CI_SAMPLES


@dataclass
class Result:
    """The outcome of one (kind, op, dtype) unit: kind is "forward" or "backward"."""

    kind: str
    op: str
    dtype: str
    status: str  # "pass", "fail", "crash", or "skip" (no sample ran on the CPU)
    detail: str = ""
    metadata_only: bool = False  # random or uninitialized outputs: shape, dtype and device compared
    # Passed only by the low-precision second chance (compare.as_accurate_as_cpu): the first difference
    # at assert_close's default tolerances. Empty if every sample is within them.
    loose: str = ""
    # The stride sweep's units (strides.py): samples run, ATen calls compared with FakeTensor and
    # calls it could not predict, and the differences found (key -> detail).
    samples: int = 0
    compared: int = 0
    unpredicted: int = 0
    differences: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return unit_key(self.kind, self.op, self.dtype)


@dataclass
class Summary:
    """Every unit's result of a sweep with `samples` per pair (report.summary_json counts them)."""

    samples: int
    results: list[Result] = field(default_factory=list)
    wall_seconds: float = 0.0  # printed by the command line, never written to the summary

    def of(self, kind: str, status: str | None = None) -> list[Result]:
        return [
            r for r in self.results if r.kind == kind and r.status != "skip" and status in (None, r.status)
        ]


# ---------------------------------------------------------------------------------------------------
# The worker: runs in its own process, imports torch (which autoloads torch_ember) and the OpInfos.
# ---------------------------------------------------------------------------------------------------


def op_name(op: Any) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def _seed_for(*parts: str) -> int:
    """A stable seed per unit, so that a chunk's results do not depend on what ran before it."""
    return zlib.crc32(" ".join(parts).encode())


def _move_tensor(x: Any, device: str) -> Any:
    """x copied to `device` with its storage: a view keeps its offset and strides over a copy of the whole
    storage, because some samples (as_strided's) read memory outside the view."""
    import torch

    x = x.detach()
    if x.layout != torch.strided:
        return x.to(device)  # sparse layouts: `to` copies the members (csrc/sparse/)
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

    flat, spec = tree_flatten(value)
    shape_leaves = tree_flatten(template)[0] if template is not None else None
    if shape_leaves is not None and len(shape_leaves) != len(flat):
        shape_leaves = None
    moved = []
    for index, x in enumerate(flat):
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


def run_forward(
    op: Any, dtype: Any, count: int, found: Random, loose: list[str] | None = None
) -> tuple[str, str]:
    """(status, detail) of op's forward on ember vs the CPU in `dtype` (see compare.check for `loose`)."""
    import torch

    name = op_name(op)
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
            check(actual, expected, op, sample, found, loose)

        try:
            _retrying(samples, index, attempt)
        except Exception as error:
            return "fail", f"sample {ran - 1}: {first_line(error)}"
    if ran == 0:
        return "skip", "no sample runs on the CPU"
    return "pass", ""


def _differentiable(outputs: Any) -> list[Any]:
    import torch

    return [
        t
        for t in leaves(outputs)
        if isinstance(t, torch.Tensor) and t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]


def run_backward(op: Any, count: int, found: Random) -> tuple[str, str]:
    """(status, detail) of the input gradients of op's float64 samples on ember vs the CPU."""
    import torch

    name = op_name(op)
    samples = _Samples(op, torch.float64, True, count, _seed_for(name, "backward"))
    ran = 0
    for index, sample in enumerate(samples.cpu):
        cpu_leaves = leaves((sample.input, sample.args, sample.kwargs))
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
            ember_leaves = leaves(moved)
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
                    check(a, e, op, sample, found)

        try:
            _retrying(samples, index, attempt)
        except Exception as error:
            return "fail", f"sample {ran - 1}: {first_line(error)}"
    if ran == 0:
        return "skip", "no differentiable sample runs on the CPU"
    return "pass", ""


def units(chunk: int, chunks: int) -> Iterator[tuple[Any, str, Any]]:
    """(op, kind, torch dtype) for the ops of one chunk (round robin over op_db, for balance)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    only = set(filter(None, os.environ.get(ONLY_ENV, "").split(",")))
    for index, op in enumerate(op_db):
        if index % chunks != chunk or (only and op_name(op) not in only):
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
    random_ops: dict[str, Random] = {}
    skipping = resume_after is not None
    with out.open("a", encoding="utf-8") as stream:

        def emit(record: dict[str, Any]) -> None:
            stream.write(json.dumps(record) + "\n")
            stream.flush()

        for op, kind, dtype in units(chunk, chunks):
            name, dtype_name = op_name(op), str(dtype).removeprefix("torch.")
            key = unit_key(kind, name, dtype_name)
            if skipping:
                skipping = key != resume_after
                continue
            emit({"start": key})
            if os.environ.get(ABORT_ENV) == key:
                os.abort()  # the crash the tests make on purpose: the driver must count it and go on
            found = random_ops.setdefault(name, Random())
            loose: list[str] = []
            try:
                if kind == "forward":
                    status, detail = run_forward(op, dtype, samples, found, loose)
                else:
                    status, detail = run_backward(op, samples, found)
            except Exception as error:  # the sweep's own code failed around the op: a failure, with why
                status, detail = "fail", f"sweep: {first_line(error)}"
            emit(
                {
                    "kind": kind,
                    "op": name,
                    "dtype": dtype_name,
                    "status": status,
                    "detail": detail,
                    "metadata_only": metadata_only(op, found),
                    "loose": loose[0] if loose and status == "pass" else "",
                }
            )


# ---------------------------------------------------------------------------------------------------
# The driver: runs the chunks in worker processes and gathers their results.
# ---------------------------------------------------------------------------------------------------


def read_records(path: Path) -> tuple[list[Result], str | None]:
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
                    record.get("loose", ""),
                    record.get("samples", 0),
                    record.get("compared", 0),
                    record.get("unpredicted", 0),
                    record.get("differences", {}),
                )
            )
            pending = None
    return results, pending


@dataclass
class _Chunk:
    index: int
    out: Path
    sweep: str = "opinfo"
    resume_after: str | None = None
    env: dict[str, str] | None = None
    process: subprocess.Popen[bytes] | None = None
    crashes: list[Result] = field(default_factory=list)
    last_size: int = -1
    last_progress: float = 0.0

    def start(self, chunks: int, samples: int) -> None:
        command = [sys.executable, str(ENTRY), "--worker", str(self.index), "--chunks", str(chunks)]
        command += ["--samples", str(samples), "--out", str(self.out), "--sweep", self.sweep]
        if self.resume_after is not None:
            command += ["--resume-after", self.resume_after]
        with self.out.with_suffix(".err").open("wb") as errors:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.DEVNULL,
                stderr=errors,
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
        results, pending = read_records(self.out)
        if pending is None and code != 0 and not results:
            # It died before its first unit (torch_ember does not import, say): nothing ran to count,
            # and a sweep that quietly ran nothing must not pass for one.
            lines = self.out.with_suffix(".err").read_text(errors="replace").strip().splitlines()
            reason = "hung" if hung else f"exit code {code}"
            raise RuntimeError(
                f"the sweep's worker for chunk {self.index} failed before its first unit "
                f"({reason}): {lines[-1] if lines else 'no error output'}"
            )
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
    samples: int,
    chunks: int = CHUNKS,
    parallel: int = PARALLEL,
    env: dict[str, str] | None = None,
    only_chunks: Sequence[int] | None = None,
    sweep: str = "opinfo",
) -> Summary:
    """Run every chunk (or `only_chunks` of the `chunks`) in worker processes, `parallel` at a time
    (`env`: extra environment for them). `sweep` is "opinfo" (this module's worker) or "strides"
    (strides.worker)."""
    started = time.perf_counter()
    summary = Summary(samples)
    selected = range(chunks) if only_chunks is None else only_chunks
    with tempfile.TemporaryDirectory(prefix="ember-opinfo-") as tmp:
        waiting = [_Chunk(i, Path(tmp) / f"chunk{i}.jsonl", sweep, env=env) for i in selected]
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
            results, _ = read_records(chunk.out)
            summary.results += results + chunk.crashes
    summary.wall_seconds = time.perf_counter() - started
    return summary
