"""The finished backend's benchmark: ember against the CPU and the host's limits, side by side.

    python -m torch_ember.bench [--json PATH] [--repeat N]
    python -m torch_ember.bench --profile {cnn,mlp}   # where a training step's time goes, by operator
    python -m torch_ember.bench --distributed [--json PATH]   # eccl's collectives (bench_distributed)

Every ratio is measured in one run, interleaved: each round times one call of each side, back
to back, and the figure is the median over rounds of the per-round ratio, so machine load that
comes and goes during the run affects both sides of a round alike. Every timed
ember call ends with `torch.accelerator.synchronize()`, so its work is finished, not only queued
(``synchronize_us``: what that costs on an idle device; ``ember_synchronize_us``: the same wait
through `torch.ember.synchronize()`); CPU calls are timed bare.
The CPU uses as many threads as torch gives it by default. Absolute times are printed for
context only; the ratios are the result. `--repeat` scales the rounds of every measurement
(the default takes about half a minute on 2 cores).

Stable keys (also written by ``--json``). Time ratios: ember / reference, lower is better.

- ``add_1m_vs_cpu``: ``torch.add(a, b, out=c)``, 1M float32, ember / CPU (target <= 1.2).
- ``add_1m_alloc_vs_cpu``: ``a + b`` (allocates its result), 1M float32, ember / CPU.
- ``latency_1elem_vs_cpu``: ``a + b`` on one element, ember / CPU (aim <= 3).
  ``latency_1elem_unsynced_vs_cpu``: the same without ember's ``synchronize`` (what a caller
  waits before it can issue the next operation; target <= 1.5: ember's functional add, sub,
  mul and div kernels run meta() once and allocate directly, csrc/aten/EmberStructured.h).
- ``mlp_step_vs_cpu``, ``cnn_step_vs_cpu``: one training step of the shared models (see
  `mlp` and `cnn`: forward, cross entropy, backward, SGD with momentum, ``zero_grad``),
  ember / CPU, same initial weights and batch (target <= 1.5).

Compiled (``torch.compile``, Inductor's kernels run as ember launches), time ratios as above:

- ``compiled_pointwise_chain_vs_eager``: `pointwise_chain` (eight pointwise operators) over 1M
  float32 on ember, compiled / eager: one fused launch against eight (target <= 0.4).
- ``graph_replay_vs_eager_small_ops``: `small_ops` (100 additions on a one-element tensor), compiled and
  captured in a `torch.accelerator.Graph`, one replay / the same operators eager; also against one call of
  the compiled function (``graph_replay_vs_compiled_small_ops``).
- ``compiled_mlp_step_vs_cpu_compiled``: the MLP's training step compiled whole (forward, loss,
  backward, SGD; `TrainingStep` with ``compiled=True``), ember / the same compiled on the CPU
  (target <= 1.2; both run on the same processor, so 1.0 is the limit).

Speed-ups: how many times slower the other path is, higher is better.

- ``fallback_vs_native_1m``, ``fallback_vs_native_1k``: ``a + b`` through the CPU fallback
  (``torch_ember._C._fallback_add``) / through ember's kernel, 1M and 1K float32 elements:
  what the fallback's copies cost, in units of the kernel.

Bandwidth ratios: ember's / the host's, higher is better.

- ``h2d_vs_memcpy``, ``d2h_vs_memcpy``: a 64 MiB ``copy_`` from pinned host memory to ember,
  and back, against a host ``memcpy`` (libc's, through ``ctypes.memmove``) between two pinned
  buffers of the same size (target >= 0.8). ``h2d_async_vs_memcpy``: the host-to-device copy
  with ``non_blocking=True``, then ``synchronize``.

Speedup: ``cached_alloc_speedup``, the time of 1 MiB allocate+free pairs through the raw
driver (``emMalloc``/``emFree``) over the same pairs through the allocator PyTorch uses for
ember tensors (``c10::GetAllocator``), both timed in C++ (target >= 10).
``cached_alloc_used_speedup``: the same with a kernel writing every page of the block before it
is freed: the driver returns freed pages to the OS, so fresh driver memory faults them in again,
while a cached block keeps them.
``pinned_cached_alloc_speedup``: 1 MiB of pinned host memory, allocated and freed
(``torch.empty(2**18, pin_memory=True)``, then dropped), without the host cache
(``torch.ember.empty_host_cache()`` after each free, so every allocation maps and populates
fresh pages) over with it (a freed block is reused), timed from Python (target >= 10).

Observation: ``profiler_overhead_mlp_step``: the MLP's training step run inside
``torch.profiler.profile(activities=[CPU, PrivateUse1])`` / outside it (target <= 1.3). The
profiled steps run in one profile, as a training loop profiles a stretch of steps; the profile's
start and its processing at the end (PyTorch's, mostly) are not in the step's time.
``memory_history_overhead_mlp_step``: the MLP's training step with
``torch.ember.memory._record_memory_history("all", stacks="python")`` recording / without
(target <= 1.2). The recording round turns history on before the step and off after it, so it
pays for the Python stack of every allocation and free, and for dropping the trace.

Counts: ``fallback_calls_mlp_step``, ``fallback_calls_cnn_step``: the calls that reach the
CPU fallback during one training step (after warm-up). The count comes from a check
registered with the fallback itself (csrc/bindings/EmberBenchSupport.cpp), so it counts every
call the fallback runs, also the ones made from inside other kernels (composite kernels,
backward formulas), and nothing else: an operator with an ember kernel, a stub, or a
composite that decomposes into ember kernels is not counted (target 0). The table lists the
operators that fell back.

AOTInductor (``torch_ember.bench_aoti``, whose docstring defines them): ``aoti_vs_compiled``
(target <= 1.1), ``aoti_dispatcher_vs_shim``.

Sparse tensors (``torch_ember.bench_sparse``, whose docstring defines them): ``sparse_mm_vs_cpu``
and ``sparse_embedding_step_vs_cpu`` (ember / CPU, target <= 1.3), ``fallback_calls_sparse_embedding_step``
(target 0).

Context keys (microseconds, GB/s) end in ``_us`` or ``_gbps``; ``load_average`` is the
machine's 1-minute load average when the run ended (other processes slow the CPU side more
than ember's: a CPU operator that splits its work over all cores waits for the busiest one).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

import torch_ember
from torch_ember import bench_aoti, bench_sparse
from torch_ember.bench_timing import Target, interleaved, median_us, ratio, synced, synchronize

COPY_BYTES = 64 << 20
ALLOC_BYTES = 1 << 20
ALLOC_PAIRS = 200  # allocate+free pairs per timed block
ALLOC_PAIRS_USED = 20  # the same, writing the memory in between (a fresh driver block costs ~1 ms)
PINNED_FLOATS = 1 << 18  # 1 MiB of float32, pinned
PINNED_PAIRS = 20  # pinned allocate+free pairs per timed block (an uncached pair costs ~0.3 ms)


TARGETS: dict[str, Target] = {
    "add_1m_vs_cpu": Target(1.2, at_most=True),
    "latency_1elem_vs_cpu": Target(3.0, at_most=True),
    "latency_1elem_unsynced_vs_cpu": Target(1.5, at_most=True),
    "h2d_vs_memcpy": Target(0.8, at_most=False),
    "d2h_vs_memcpy": Target(0.8, at_most=False),
    "cached_alloc_speedup": Target(10.0, at_most=False),
    "pinned_cached_alloc_speedup": Target(10.0, at_most=False),
    "mlp_step_vs_cpu": Target(1.5, at_most=True),
    "cnn_step_vs_cpu": Target(1.5, at_most=True),
    "fallback_calls_mlp_step": Target(0, at_most=True),
    "fallback_calls_cnn_step": Target(0, at_most=True),
    "compiled_pointwise_chain_vs_eager": Target(0.4, at_most=True),
    "compiled_mlp_step_vs_cpu_compiled": Target(1.2, at_most=True),
    "graph_replay_vs_eager_small_ops": Target(0.3, at_most=True),
    "graph_replay_train_step_vs_eager": Target(0.5, at_most=True),
    "memory_history_overhead_mlp_step": Target(1.2, at_most=True),
    "profiler_overhead_mlp_step": Target(1.3, at_most=True),
    **bench_sparse.TARGETS,
    **bench_aoti.TARGETS,
}

STABLE_KEYS = (
    "add_1m_vs_cpu",
    "latency_1elem_vs_cpu",
    "fallback_vs_native_1m",
    "h2d_vs_memcpy",
    "d2h_vs_memcpy",
    "cached_alloc_speedup",
    "pinned_cached_alloc_speedup",
    "mlp_step_vs_cpu",
    "cnn_step_vs_cpu",
    "fallback_calls_mlp_step",
    "fallback_calls_cnn_step",
    "compiled_pointwise_chain_vs_eager",
    "compiled_mlp_step_vs_cpu_compiled",
    "graph_replay_vs_eager_small_ops",
    "graph_replay_train_step_vs_eager",
    "memory_history_overhead_mlp_step",
    "profiler_overhead_mlp_step",
    "sparse_mm_vs_cpu",
    "sparse_embedding_step_vs_cpu",
    "fallback_calls_sparse_embedding_step",
    "aoti_vs_compiled",
)


def _pair(numel: int, device: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(numel)
    a, b = torch.rand(numel, generator=generator), torch.rand(numel, generator=generator)
    return a.to(device), b.to(device)


# -- Operators --------------------------------------------------------------------------------


def _measure_add(repeat: int, results: dict[str, float]) -> None:
    a, b = _pair(1 << 20)
    ea, eb = a.to("ember"), b.to("ember")
    out, eout = torch.empty_like(a), torch.empty_like(ea)
    cpu, ember = interleaved(
        [lambda: torch.add(a, b, out=out), synced(lambda: torch.add(ea, eb, out=eout))], repeat
    )
    results["add_1m_vs_cpu"] = ratio(ember, cpu)
    results["add_1m_cpu_us"] = median_us(cpu)
    cpu, ember = interleaved([lambda: a + b, synced(lambda: ea + eb)], repeat)
    results["add_1m_alloc_vs_cpu"] = ratio(ember, cpu)

    one, eone = torch.ones(1), torch.ones(1, device="ember")
    cpu, ember, unsynced, sync, module_sync = interleaved(
        [
            lambda: one + one,
            synced(lambda: eone + eone),
            lambda: eone + eone,
            synced(lambda: None),
            torch_ember.device_module.synchronize,
        ],
        repeat * 5,
    )
    results["latency_1elem_vs_cpu"] = ratio(ember, cpu)
    # Without the synchronize: what a caller waits before it can queue the next operation.
    results["latency_1elem_unsynced_vs_cpu"] = ratio(unsynced, cpu)
    results["latency_1elem_cpu_us"] = median_us(cpu)
    results["latency_1elem_ember_us"] = median_us(ember)
    results["synchronize_us"] = median_us(sync)  # included in every ember figure
    results["ember_synchronize_us"] = median_us(module_sync)

    fallback_add = torch_ember._C._fallback_add
    for label, numel in (("1m", 1 << 20), ("1k", 1 << 10)):
        x, y = _pair(numel, "ember")
        native, fallback = interleaved(
            [synced(lambda x=x, y=y: x + y), synced(lambda x=x, y=y: fallback_add(x, y))], repeat
        )
        results[f"fallback_vs_native_{label}"] = ratio(fallback, native)


# -- Copies and the allocator ---------------------------------------------------------------


def _measure_copies(repeat: int, results: dict[str, float]) -> None:
    source = torch.ones(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    host = torch.zeros(COPY_BYTES, dtype=torch.uint8, pin_memory=True)
    device = torch.empty(COPY_BYTES, dtype=torch.uint8, device="ember")
    memcpy, h2d, d2h, h2d_async = interleaved(
        [
            lambda: ctypes.memmove(host.data_ptr(), source.data_ptr(), COPY_BYTES),
            synced(lambda: device.copy_(source)),
            synced(lambda: host.copy_(device)),
            synced(lambda: device.copy_(source, non_blocking=True)),
        ],
        max(3, repeat // 5),  # a 64 MiB copy varies by +-10% on a busy machine: 40 rounds by default
    )
    results["h2d_vs_memcpy"] = ratio(memcpy, h2d)
    results["d2h_vs_memcpy"] = ratio(memcpy, d2h)
    results["h2d_async_vs_memcpy"] = ratio(memcpy, h2d_async)
    results["memcpy_gbps"] = COPY_BYTES / statistics.median(memcpy) / 1e9


def _support_library() -> ctypes.CDLL:
    """The benchmark's C entry points, compiled into torch_ember._C (csrc/bindings/EmberBenchSupport.cpp)."""
    lib = ctypes.CDLL(torch_ember._C.__file__)
    lib.emberBenchAllocFree.argtypes = [
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(ctypes.c_double),
    ]
    lib.emberBenchAllocFree.restype = ctypes.c_int
    lib.emberBenchFallbackCalls.argtypes = []
    lib.emberBenchFallbackCalls.restype = ctypes.c_uint64
    lib.emberBenchRecordFallbackNames.argtypes = [ctypes.c_int]
    lib.emberBenchRecordFallbackNames.restype = None
    lib.emberBenchFallbackNames.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.emberBenchFallbackNames.restype = ctypes.c_size_t
    return lib


def _alloc_free_seconds(lib: ctypes.CDLL, raw: bool, touch: bool = False) -> float:
    """Seconds per 1 MiB allocate+free pair (with every page written in between if `touch`)."""
    seconds = ctypes.c_double(0.0)
    pairs = ALLOC_PAIRS_USED if touch else ALLOC_PAIRS
    if lib.emberBenchAllocFree(ALLOC_BYTES, pairs, int(raw), int(touch), ctypes.byref(seconds)) != 0:
        path = "driver" if raw else "allocator"
        raise RuntimeError(f"ember: the {ALLOC_BYTES}-byte allocate+free loop failed ({path})")
    return seconds.value / pairs


def _measure_allocator(repeat: int, results: dict[str, float]) -> None:
    lib = _support_library()
    # The cache starts empty: the blocks the measurements above left behind would make the hit path
    # slower (136 -> 220 ns per pair, cause not pinned down), and what is measured here is the reuse of
    # one block, not whatever state earlier benchmarks leave.
    torch.accelerator.empty_cache()
    for touch, key in ((False, "cached_alloc_speedup"), (True, "cached_alloc_used_speedup")):
        # Interleaved like the rest, but timed by the C++ loop: a block of pairs through each, in turn.
        cached_blocks: list[float] = []
        raw_blocks: list[float] = []
        _alloc_free_seconds(lib, raw=False, touch=touch)  # the first allocation fills the cache
        for _ in range(max(5, repeat // 10)):
            cached_blocks.append(_alloc_free_seconds(lib, raw=False, touch=touch))
            raw_blocks.append(_alloc_free_seconds(lib, raw=True, touch=touch))
        results[key] = ratio(raw_blocks, cached_blocks)
        suffix = "_used" if touch else ""
        results[f"alloc_free{suffix}_cached_us"] = median_us(cached_blocks)
        results[f"alloc_free{suffix}_driver_us"] = median_us(raw_blocks)


def _pinned_alloc_free_seconds(cached: bool) -> float:
    """Seconds per 1 MiB pinned allocate+free pair; without the cache if not `cached`."""
    start = time.perf_counter()
    for _ in range(PINNED_PAIRS):
        torch.empty(PINNED_FLOATS, pin_memory=True)  # freed at once: back to the cache
        if not cached:
            torch_ember.device_module.empty_host_cache()  # ... and from there to the OS
    return (time.perf_counter() - start) / PINNED_PAIRS


def _measure_pinned(repeat: int, results: dict[str, float]) -> None:
    # In blocks of pairs, not call by call: an uncached pair empties the cache the cached pairs use.
    cached_blocks: list[float] = []
    uncached_blocks: list[float] = []
    for _ in range(max(5, repeat // 10)):
        torch.empty(PINNED_FLOATS, pin_memory=True)  # the cache holds one block again
        cached_blocks.append(_pinned_alloc_free_seconds(cached=True))
        uncached_blocks.append(_pinned_alloc_free_seconds(cached=False))
    results["pinned_cached_alloc_speedup"] = ratio(uncached_blocks, cached_blocks)
    results["pinned_alloc_free_cached_us"] = median_us(cached_blocks)
    results["pinned_alloc_free_uncached_us"] = median_us(uncached_blocks)


# -- Training steps ---------------------------------------------------------------------------


def mlp() -> nn.Module:
    """The shared MLP (notes of issue 8): batch 64 of 256 features, 10 classes."""
    return nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))


def cnn() -> nn.Module:
    """The shared CNN: batch 32 of 3x32x32 images, 10 classes."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Dropout(0.1),
        nn.Linear(32, 10),
    )


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "mlp": (mlp, (64, 256)),
    "cnn": (cnn, (32, 3, 32, 32)),
}


class TrainingStep:
    """One training step of model `name` on `device`: forward, cross entropy, backward, SGD step,
    `zero_grad(set_to_none=True)`. Every device starts from the same weights and batch.
    `compiled`: the step is `torch.compile`d whole (Dynamo breaks the graph at `backward()`; the
    forward, the backward and the optimizer's update are each compiled)."""

    def __init__(self, name: str, device: str, compiled: bool = False) -> None:
        make, shape = MODELS[name]
        torch.manual_seed(0)
        model = make()
        inputs, targets = torch.randn(shape), torch.randint(0, 10, (shape[0],))
        self.model = model.to(device)
        self.inputs, self.targets = inputs.to(device), targets.to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
        self._run: Callable[[], None] = torch.compile(self._step) if compiled else self._step

    def __call__(self) -> None:
        self._run()

    def _step(self) -> None:
        loss = F.cross_entropy(self.model(self.inputs), self.targets)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def fallback_calls(call: Callable[[], object]) -> tuple[int, list[str]]:
    """The calls that reach ember's CPU fallback while `call` runs, and their operators in order."""
    lib = _support_library()
    synchronize()
    lib.emberBenchRecordFallbackNames(1)
    before = lib.emberBenchFallbackCalls()
    try:
        call()
        synchronize()
    finally:
        after = lib.emberBenchFallbackCalls()
        lib.emberBenchRecordFallbackNames(0)
    size = lib.emberBenchFallbackNames(None, 0)
    buffer = ctypes.create_string_buffer(size)
    lib.emberBenchFallbackNames(buffer, size)
    return after - before, buffer.value.decode().split()


def _measure_steps(repeat: int, results: dict[str, float], fallback_ops: dict[str, list[str]]) -> None:
    for name in MODELS:
        cpu_step, ember_step = TrainingStep(name, "cpu"), TrainingStep(name, "ember")
        cpu, ember = interleaved([cpu_step, synced(ember_step)], max(3, repeat // 10))
        results[f"{name}_step_vs_cpu"] = ratio(ember, cpu)
        results[f"{name}_step_cpu_us"] = median_us(cpu)
        count, names = fallback_calls(ember_step)  # after interleaved's warm-up: a steady step
        results[f"fallback_calls_{name}_step"] = count
        fallback_ops[name] = names


# -- Compiled ---------------------------------------------------------------------------------


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    """Eight pointwise operators: eight launches eagerly, one fused kernel compiled."""
    y = x * 2
    y = y + 1
    y = torch.sin(y)
    y = y * y
    y = y - 0.5
    y = torch.exp(y)
    y = y / 3
    return torch.relu(y)


def _measure_compiled(repeat: int, results: dict[str, float]) -> None:
    x, _ = _pair(1 << 20, "ember")
    chain = torch.compile(pointwise_chain)
    eager, compiled = interleaved(
        [synced(lambda: pointwise_chain(x)), synced(lambda: chain(x))], max(3, repeat // 4)
    )
    results["compiled_pointwise_chain_vs_eager"] = ratio(compiled, eager)
    results["pointwise_chain_eager_us"] = median_us(eager)

    cpu_step, ember_step = (
        TrainingStep("mlp", "cpu", compiled=True),
        TrainingStep("mlp", "ember", compiled=True),
    )
    # The first call compiles; the second recompiles the update (the momentum buffers exist from then on).
    for step in (cpu_step, ember_step):
        for _ in range(3):
            step()
    # Twice the rounds of the eager steps: this ratio sits close to its target.
    cpu, ember = interleaved([cpu_step, synced(ember_step)], max(3, repeat // 5))
    results["compiled_mlp_step_vs_cpu_compiled"] = ratio(ember, cpu)
    results["compiled_mlp_step_cpu_us"] = median_us(cpu)


def small_ops(t: torch.Tensor) -> torch.Tensor:
    """100 pointwise operators, each on the whole (one-element) tensor."""
    for _ in range(100):
        t = t + 1
    return t


def _measure_graph(repeat: int, results: dict[str, float]) -> None:
    # Captured compiled: ember records kernels launched by value, the ones Inductor generates.
    x = torch.zeros(1, device="ember")
    compiled = torch.compile(small_ops)
    compiled(x)
    side = torch_ember.device_module.Stream()
    graph = torch.accelerator.Graph()
    with torch_ember.device_module.stream(side), graph:
        compiled(x)
    eager, replay, call = interleaved(
        [synced(lambda: small_ops(x)), synced(graph.replay), synced(lambda: compiled(x))], repeat
    )
    results["graph_replay_vs_eager_small_ops"] = ratio(replay, eager)
    results["graph_replay_vs_compiled_small_ops"] = ratio(replay, call)
    results["small_ops_eager_us"] = median_us(eager)
    graph.reset()


def _measure_graph_train_step(repeat: int, results: dict[str, float]) -> None:
    # Captured eager: every ember kernel is recorded by value, so a whole training step replays.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to("ember")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    x, y = torch.randn(8, 64, device="ember"), torch.randn(8, 64, device="ember")

    def step() -> None:
        optimizer.zero_grad(set_to_none=False)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        optimizer.step()

    # Warmed up on the capture's stream (as CUDA's recipe does): the gradients and momentum buffers
    # exist before the capture, and autograd's accumulation runs on that stream.
    side = torch_ember.device_module.Stream()
    with torch_ember.device_module.stream(side):
        step()
    graph = torch_ember.device_module.EmberGraph()
    with torch_ember.device_module.graph(graph, stream=side):
        step()
    # On one host thread (chapter 15b says why): the backward's matrix products run on autograd's
    # ember thread, whose OpenMP team beside the caller's oversubscribes a machine with few cores,
    # and libgomp then wakes a sleeping team for every product, eager or replayed.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        eager, replay = interleaved([synced(step), synced(graph.replay)], repeat)
    finally:
        torch.set_num_threads(threads)
    results["graph_replay_train_step_vs_eager"] = ratio(replay, eager)
    results["train_step_eager_us"] = median_us(eager)
    graph.reset()


# -- Observation ------------------------------------------------------------------------------


def _measure_memory_history(repeat: int, results: dict[str, float]) -> None:
    memory = torch_ember.device_module.memory
    step = TrainingStep("mlp", "ember")

    def recorded() -> None:
        memory._record_memory_history("all", stacks="python")
        step()
        synchronize()
        memory._record_memory_history(None)

    plain, with_history = interleaved([synced(step), recorded], max(3, repeat // 5))
    results["memory_history_overhead_mlp_step"] = ratio(with_history, plain)


def _measure_profiler(repeat: int, results: dict[str, float]) -> None:
    from torch.profiler import ProfilerActivity, profile

    step = synced(TrainingStep("mlp", "ember"))
    block = max(5, repeat // 10)

    def timed_block() -> list[float]:
        times = []
        for _ in range(block):
            start = time.perf_counter()
            step()
            times.append(time.perf_counter() - start)
        return times

    for _ in range(3):
        step()  # warm-up
    plain: list[float] = []
    profiled: list[float] = []
    for _ in range(3):  # alternated, so that a busy moment of the machine hits both
        plain += timed_block()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]):
            profiled += timed_block()
    results["profiler_overhead_mlp_step"] = statistics.median(profiled) / statistics.median(plain)


# The measurements by name, in the order they run (`--only` picks some): each writes its figures
# into `results` and the operators that fell back into `fallbacks`.
_PARTS: dict[str, Callable[[int, dict[str, float], dict[str, list[str]]], None]] = {
    "add": lambda repeat, results, _: _measure_add(repeat, results),
    "copies": lambda repeat, results, _: _measure_copies(repeat, results),
    "allocator": lambda repeat, results, _: _measure_allocator(repeat, results),
    "pinned": lambda repeat, results, _: _measure_pinned(repeat, results),
    "steps": _measure_steps,
    "compiled": lambda repeat, results, _: _measure_compiled(repeat, results),
    "graph": lambda repeat, results, _: _measure_graph(repeat, results),
    "graph_train_step": lambda repeat, results, _: _measure_graph_train_step(repeat, results),
    "memory_history": lambda repeat, results, _: _measure_memory_history(repeat, results),
    "profiler": lambda repeat, results, _: _measure_profiler(repeat, results),
    "sparse": lambda repeat, results, fallbacks: bench_sparse.measure(
        repeat, results, fallbacks, fallback_calls
    ),
    "aoti": lambda repeat, results, _: bench_aoti.measure(repeat, results, mlp),
}
PARTS = tuple(_PARTS)


def measure(
    repeat: int = 200,
    fallback_ops: dict[str, list[str]] | None = None,
    only: frozenset[str] | None = None,
) -> dict[str, float]:
    """Run every benchmark (or those `only` names, of PARTS) once; the figures under their keys
    (`fallback_ops` gets the operators that fell back)."""
    results: dict[str, float] = {}
    fallbacks = fallback_ops if fallback_ops is not None else {}
    torch_ember.device_module.set_device(0)
    for name, run in _PARTS.items():
        if only is None or name in only:
            run(repeat, results, fallbacks)
    results["load_average"] = os.getloadavg()[0]
    return results


# -- Report -----------------------------------------------------------------------------------

ROWS = [
    ("add, 1M float32, out= (ember / CPU)", "add_1m_vs_cpu"),
    ("add, 1M float32, a + b (ember / CPU)", "add_1m_alloc_vs_cpu"),
    ("add, 1 element (ember / CPU)", "latency_1elem_vs_cpu"),
    ("add, 1 element, no synchronize (ember / CPU)", "latency_1elem_unsynced_vs_cpu"),
    ("add, 1M: CPU fallback / ember kernel (higher is better)", "fallback_vs_native_1m"),
    ("add, 1K: CPU fallback / ember kernel (higher is better)", "fallback_vs_native_1k"),
    ("64 MiB pinned -> ember (memcpy = 1)", "h2d_vs_memcpy"),
    ("64 MiB pinned -> ember, non_blocking (memcpy = 1)", "h2d_async_vs_memcpy"),
    ("64 MiB ember -> pinned (memcpy = 1)", "d2h_vs_memcpy"),
    ("1 MiB alloc+free: driver / allocator", "cached_alloc_speedup"),
    ("1 MiB alloc+write+free: driver / allocator", "cached_alloc_used_speedup"),
    ("1 MiB pinned alloc+free: no cache / cache", "pinned_cached_alloc_speedup"),
    ("MLP training step (ember / CPU)", "mlp_step_vs_cpu"),
    ("CNN training step (ember / CPU)", "cnn_step_vs_cpu"),
    ("MLP step: calls to the CPU fallback", "fallback_calls_mlp_step"),
    ("CNN step: calls to the CPU fallback", "fallback_calls_cnn_step"),
    ("8-op pointwise chain, 1M, ember: compiled / eager", "compiled_pointwise_chain_vs_eager"),
    ("MLP training step, compiled (ember / CPU)", "compiled_mlp_step_vs_cpu_compiled"),
    ("100 one-element ops: graph replay / eager", "graph_replay_vs_eager_small_ops"),
    ("100 one-element ops: graph replay / compiled call", "graph_replay_vs_compiled_small_ops"),
    ("MLP training step (8 x 64), eager, 1 thread: graph replay / eager", "graph_replay_train_step_vs_eager"),
    ("MLP step: memory history recording / not", "memory_history_overhead_mlp_step"),
    ("MLP step: profiled (CPU + ember) / not", "profiler_overhead_mlp_step"),
    *bench_sparse.TABLE_ROWS,
    *bench_aoti.TABLE_ROWS,
]


# The figures the table's context line names. Several parts measure them, so the line is shown only
# when every part ran.
CONTEXT_KEYS = (
    "add_1m_cpu_us",
    "latency_1elem_cpu_us",
    "latency_1elem_ember_us",
    "synchronize_us",
    "ember_synchronize_us",
    "memcpy_gbps",
    "alloc_free_cached_us",
    "alloc_free_driver_us",
    "mlp_step_cpu_us",
    "cnn_step_cpu_us",
    "compiled_mlp_step_cpu_us",
    "pointwise_chain_eager_us",
)


def table(results: dict[str, float], fallback_ops: dict[str, list[str]] | None = None) -> str:
    width = max(len(label) for label, _ in ROWS)
    lines = [f"{'figure':<{width}}  {'value':>8}  {'target':>7}  met", "-" * (width + 25)]
    for label, key in ROWS:
        if key not in results:  # a part `--only` left out
            continue
        value = results[key]
        shown = f"{value:8.0f}" if key.startswith("fallback_calls") else f"{value:7.2f}x"
        target = TARGETS.get(key)
        met = "" if target is None else ("yes" if target.met(value) else "NO")
        lines.append(f"{label:<{width}}  {shown}  {str(target or ''):>7}  {met}")
    if set(CONTEXT_KEYS) <= results.keys():  # every part measured (not `--only`)
        lines.append(
            f"(context: CPU add of 1M float32 {results['add_1m_cpu_us']:.0f} us, of 1 element "
            f"{results['latency_1elem_cpu_us']:.1f} us, ember's {results['latency_1elem_ember_us']:.1f} us; "
            f"synchronize {results['synchronize_us']:.1f} us (torch.ember's {results['ember_synchronize_us']:.1f} us); memcpy {results['memcpy_gbps']:.1f} GB/s; "
            f"1 MiB alloc+free {results['alloc_free_cached_us']:.2f} us cached, "
            f"{results['alloc_free_driver_us']:.1f} us driver; CPU steps MLP "
            f"{results['mlp_step_cpu_us'] / 1e3:.1f} ms, CNN {results['cnn_step_cpu_us'] / 1e3:.1f} ms, "
            f"MLP compiled {results['compiled_mlp_step_cpu_us'] / 1e3:.1f} ms; eager ember chain "
            f"{results['pointwise_chain_eager_us'] / 1e3:.1f} ms; "
            f"{torch.get_num_threads()} CPU threads, load average {results['load_average']:.1f})"
        )
    cores = os.cpu_count() or 1
    if results["load_average"] > cores:
        lines.append(
            f"(the machine was busy: load average {results['load_average']:.1f} on {cores} cores; CPU operators "
            "that use every core slow down most, so the ratios are less certain than usual)"
        )
    for name, names in (fallback_ops or {}).items():
        if names:
            counts = ", ".join(f"{op} x{n}" for op, n in Counter(names).most_common())
            lines.append(f"{name.upper()} step, operators run by the CPU fallback: {counts}")
    return "\n".join(lines)


def profile_step(name: str, steps: int = 5, rows: int = 15) -> str:
    """Where one training step's time goes, per operator, on the CPU and on ember (torch.profiler)."""
    tables = []
    for device in ("cpu", "ember"):
        step = TrainingStep(name, device)
        for _ in range(2):
            step()
        synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profiler:
            for _ in range(steps):
                step()
            synchronize()
        averages = profiler.key_averages()
        tables.append(f"{name.upper()} step on {device}, {steps} steps, by self time:\n")
        tables.append(averages.table(sort_by="self_cpu_time_total", row_limit=rows))
    return "\n".join(tables)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--repeat", type=int, default=200, help="rounds of the small measurements")
    parser.add_argument(
        "--profile",
        choices=sorted(MODELS),
        help="instead: profile this model's training step on the CPU and on ember, by operator",
    )
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="instead: eccl's collectives and DDP on 2 spawned ranks (torch_ember.bench_distributed)",
    )
    parser.add_argument(
        "--only",
        type=lambda text: frozenset(text.split(",")),
        help=f"only these measurements, comma-separated, of: {', '.join(PARTS)}",
    )
    args = parser.parse_args(argv)
    if args.only is not None and not args.only <= set(PARTS):
        parser.error(
            f"--only: unknown {', '.join(sorted(args.only - set(PARTS)))} (known: {', '.join(PARTS)})"
        )
    if args.profile is not None:
        print(profile_step(args.profile))
        return
    if args.distributed:
        from torch_ember import bench_distributed

        results = bench_distributed.measure(args.repeat)
        assert all(math.isfinite(value) for value in results.values()), results
        print(bench_distributed.table(results))
        if args.json is not None:
            args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")
        return
    fallback_ops: dict[str, list[str]] = {}
    results = measure(args.repeat, fallback_ops, args.only)
    assert all(math.isfinite(value) for value in results.values()), results
    print(table(results, fallback_ops))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
