"""eccl's benchmark: ember's collectives against gloo's, the host's memcpy, and one process.

    python -m torch_ember.bench --distributed [--json PATH] [--repeat N]

The run spawns its own ranks: `WORLD` processes, ranks on ember:0 and ember:1, that meet through
a TCPStore the benchmark's process serves on a free port. Each pair of ranks joins one group,
``init_process_group("cpu:gloo,ember:eccl")``: the same call runs eccl on ember tensors and gloo
on CPU tensors. Rank 0 times; every figure is measured in the same run, interleaved round by round
as in `torch_ember.bench`, and a ratio is the median over rounds of the per-round ratio. An eccl
call is timed to ``torch.accelerator.synchronize()`` after it (its kernel finished, not only
queued); gloo's ``all_reduce`` returns when it is done.

Bus bandwidth: ``bytes * 2 (n - 1) / n / seconds`` for an all-reduce of ``bytes`` over ``n``
ranks, the traffic each rank's link carries in a ring whatever the algorithm; so it compares
algorithms, sizes and group sizes on one scale (NCCL's tests define it so).

Stable keys (also written by ``--json``):

- ``allreduce_64m_busbw_vs_gloo``: all-reduce of 64 MiB float32 on 2 ranks, eccl on ember
  tensors / gloo on CPU tensors, by bus bandwidth (target >= 2).
- ``allreduce_64m_busbw_vs_memcpy``: eccl's bus bandwidth for the same all-reduce / the host's
  memcpy bandwidth (libc's, ``ctypes.memmove`` of 64 MiB, timed on rank 0 between the rounds)
  (target >= 0.5).
- ``allreduce_auto_vs_best_min``: the backend's own choice against the better of the two algorithms
  forced, at each size from 4 KiB to 64 MiB: the smallest over sizes of auto's bus bandwidth / the
  better fixed algorithm's (target >= 0.9). The three are timed in the same pair of ranks, in turn
  within each round, and the round's first place rotates: a figure measured in another pair of ranks,
  or always first in its round, differs by more than the algorithms do on a busy machine (measured:
  the same algorithm 3x apart in two pairs run a minute apart).
- ``ddp_step_2proc_vs_1proc``: a training step of `ddp_model` (forward, cross entropy, backward,
  SGD with momentum) under ``DistributedDataParallel`` on 2 ranks, each with half the batch /
  the same step in one process on the whole batch, without DDP (target <= 1.3). Both use the
  whole machine: the single process with torch's default threads (one per core), each rank with
  its share of the cores, as torchrun sets ``OMP_NUM_THREADS``.

Informational: ``allreduce_{size}_busbw_{algorithm}_gbps`` for sizes 4k, 64k, 1m, 16m, 64m and
algorithms ``one_shot``, ``ring`` (forced by ``EMBER_ECCL_ALGO``, which chooseAllreduce reads at each call)
and ``auto`` (the backend's choice by size, chooseAllreduce); ``allreduce_{size}_auto_vs_best``;
``allreduce_64m_{eccl,gloo}_busbw_gbps``, ``memcpy_gbps``, ``ddp_step_{2proc,1proc}_us``.
"""

from __future__ import annotations

import ctypes
import json
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import torch_ember  # noqa: F401 (registers ember and eccl in the spawned ranks)
from torch_ember.bench_timing import Target, interleaved, median_us, ratio, synced

WORLD = 2
ALLREDUCE_BYTES = 64 << 20
SIZES = {"4k": 4 << 10, "64k": 64 << 10, "1m": 1 << 20, "16m": 16 << 20, "64m": 64 << 20}
ALGORITHMS = ("auto", "one_shot", "ring")  # auto: the backend's choice by size
DDP_BATCH = 256  # the whole batch; each rank takes half
TIMEOUT = timedelta(seconds=120)  # a rank that hangs ends the run with an error, not forever

TARGETS: dict[str, Target] = {
    "allreduce_64m_busbw_vs_gloo": Target(2.0, at_most=False),
    "allreduce_64m_busbw_vs_memcpy": Target(0.5, at_most=False),
    "allreduce_auto_vs_best_min": Target(0.9, at_most=False),
    "ddp_step_2proc_vs_1proc": Target(1.3, at_most=True),
}

STABLE_KEYS = tuple(TARGETS)


def busbw_gbps(nbytes: int, seconds: float, world: int = WORLD) -> float:
    """An all-reduce's bus bandwidth in GB/s: what each rank's link carries in a ring."""
    return nbytes * 2 * (world - 1) / world / seconds / 1e9


def ddp_model() -> nn.Module:
    """An MLP whose step is mostly matrix products (a few ms each way on 2 cores) and whose
    gradients (1.6M floats, 6 MiB) fill a few of DDP's buckets: batch `DDP_BATCH` of 512 features."""
    return nn.Sequential(
        nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)
    )


# -- In each rank -----------------------------------------------------------------------------


def _step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> Callable[[], None]:
    """One training step: forward, cross entropy, backward, SGD step, `zero_grad`."""

    def run() -> None:
        F.cross_entropy(model(inputs), targets).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return run


def _measure_allreduce(repeat: int, rank: int, results: dict[str, float]) -> None:
    device = torch.device("ember", rank)
    numel = ALLREDUCE_BYTES // 4
    # AVG keeps the values where they are, round after round (SUM would double them).
    on_ember = torch.ones(numel, device=device)
    on_cpu = torch.ones(numel)
    source, target = torch.ones(numel), torch.empty(numel)

    def memcpy() -> None:
        if rank == 0:
            ctypes.memmove(target.data_ptr(), source.data_ptr(), ALLREDUCE_BYTES)

    # Each in a phase of its own, back to back, as nccl-tests times a collective: interleaved with a
    # 64 MiB memcpy or a gloo call, which leave the caches and the other rank's thread elsewhere, each
    # eccl call paid 30-40 % more (measured), which is the neighbour's cost, not eccl's.
    rounds = max(5, repeat // 20)
    (eccl,) = interleaved([synced(lambda: dist.all_reduce(on_ember, op=dist.ReduceOp.AVG))], rounds)
    (gloo,) = interleaved([lambda: dist.all_reduce(on_cpu, op=dist.ReduceOp.AVG)], rounds)
    (copy,) = interleaved([memcpy], rounds)
    # Phases, not rounds: a ratio of the medians.
    results["allreduce_64m_busbw_vs_gloo"] = statistics.median(gloo) / statistics.median(eccl)
    # The bus carries bytes * 2 (n - 1) / n: the same as one copy of the data for 2 ranks.
    factor = 2 * (WORLD - 1) / WORLD
    results["allreduce_64m_busbw_vs_memcpy"] = statistics.median(copy) / statistics.median(eccl) * factor
    results["allreduce_64m_eccl_busbw_gbps"] = busbw_gbps(ALLREDUCE_BYTES, statistics.median(eccl))
    results["allreduce_64m_gloo_busbw_gbps"] = busbw_gbps(ALLREDUCE_BYTES, statistics.median(gloo))
    results["memcpy_gbps"] = ALLREDUCE_BYTES / statistics.median(copy) / 1e9


def rotated(calls: list[Callable[[], object]], rounds: int, warmup: int = 2) -> list[list[float]]:
    """As `interleaved`, but round r starts with call r mod len(calls): whatever the first call of a round
    pays (here the ranks' drift since the previous round, which the first collective absorbs) falls on
    each call in turn."""
    for _ in range(warmup):
        for call in calls:
            call()
    times: list[list[float]] = [[] for _ in calls]
    for r in range(max(1, rounds)):
        for i in range(len(calls)):
            index = (r + i) % len(calls)
            start = time.perf_counter()
            calls[index]()
            times[index].append(time.perf_counter() - start)
    return times


def auto_vs_best(auto: list[float], fixed: dict[str, list[float]]) -> float:
    """Auto's bus bandwidth / the better fixed algorithm's (the one of the lower median time): the
    median over rounds of that algorithm's time / auto's, timed in the same round."""
    best = min(fixed.values(), key=statistics.median)
    return ratio(best, auto)


def _measure_sizes(repeat: int, rank: int, results: dict[str, float]) -> None:
    device = torch.device("ember", rank)

    def forced(algorithm: str, t: torch.Tensor) -> Callable[[], None]:
        def run() -> None:
            if algorithm == "auto":
                os.environ.pop("EMBER_ECCL_ALGO", None)
            else:
                os.environ["EMBER_ECCL_ALGO"] = algorithm  # chooseAllreduce reads it at each call
            dist.all_reduce(t, op=dist.ReduceOp.AVG)

        return synced(run)

    worst = float("inf")
    for label, nbytes in SIZES.items():
        t = torch.ones(nbytes // 4, device=device)
        # Small calls are cheap and noisy: more rounds for them, fewer for 64 MiB.
        rounds = max(5, min(repeat, (repeat << 20) // nbytes // 4))
        times = dict(zip(ALGORITHMS, rotated([forced(a, t) for a in ALGORITHMS], rounds), strict=True))
        for algorithm, samples in times.items():
            results[f"allreduce_{label}_busbw_{algorithm}_gbps"] = busbw_gbps(
                nbytes, statistics.median(samples)
            )
        fixed = {a: samples for a, samples in times.items() if a != "auto"}
        results[f"allreduce_{label}_auto_vs_best"] = auto_vs_best(times["auto"], fixed)
        worst = min(worst, results[f"allreduce_{label}_auto_vs_best"])
    os.environ.pop("EMBER_ECCL_ALGO", None)
    results["allreduce_auto_vs_best_min"] = worst


def _measure_ddp(repeat: int, rank: int, results: dict[str, float]) -> None:
    device = torch.device("ember", rank)
    torch.manual_seed(0)
    model = ddp_model()
    inputs, targets = torch.randn(DDP_BATCH, 512), torch.randint(0, 10, (DDP_BATCH,))
    half = DDP_BATCH // WORLD
    replica = DistributedDataParallel(ddp_model().to(device))
    replica.module.load_state_dict(model.state_dict())
    ddp_step = _step(
        replica,
        torch.optim.SGD(replica.parameters(), lr=0.01, momentum=0.9),
        inputs[rank * half : (rank + 1) * half].to(device),
        targets[rank * half : (rank + 1) * half].to(device),
    )
    single = model.to(device)
    single_step = _step(
        single,
        torch.optim.SGD(single.parameters(), lr=0.01, momentum=0.9),
        inputs.to(device),
        targets.to(device),
    )
    every_core = torch.get_num_threads()
    share = max(1, every_core // WORLD)
    # Between the calls the other rank waits here: a barrier of gloo's, asleep in a socket.
    coordination = dist.new_group(backend="gloo")

    def distributed() -> None:
        dist.barrier(group=coordination)
        torch.set_num_threads(share)
        ddp_step()
        torch.accelerator.synchronize()

    def one_process() -> None:
        torch.set_num_threads(every_core)
        if rank == 0:
            single_step()
            torch.accelerator.synchronize()

    ddp, one = interleaved([distributed, one_process], max(3, repeat // 20))
    results["ddp_step_2proc_vs_1proc"] = ratio(ddp, one)
    results["ddp_step_2proc_us"] = median_us(ddp)
    results["ddp_step_1proc_us"] = median_us(one)


def _rank_main(rank: int, port: int, task: str, repeat: int) -> None:
    """One rank of the pair that runs `task` ("targets": every figure)."""
    store = dist.PrefixStore(task, dist.TCPStore("127.0.0.1", port, is_master=False, timeout=TIMEOUT))
    torch.ember.set_device(rank)
    dist.init_process_group("cpu:gloo,ember:eccl", store=store, rank=rank, world_size=WORLD, timeout=TIMEOUT)
    results: dict[str, float] = {}
    try:
        _measure_allreduce(repeat, rank, results)
        _measure_sizes(repeat, rank, results)
        _measure_ddp(repeat, rank, results)
    finally:
        dist.destroy_process_group()
    if rank == 0:
        store.set("results", json.dumps(results))


# -- In the benchmark's process ---------------------------------------------------------------


def _run_pair(store: dist.TCPStore, task: str, repeat: int) -> dict[str, float]:
    context = multiprocessing.get_context("spawn")  # fresh processes: no forked torch state
    ranks = [
        context.Process(target=_rank_main, args=(rank, store.port, task, repeat)) for rank in range(WORLD)
    ]
    # The ranks inherit the environment: c10d's warnings (about timers for CUDA only, hooks) are noise here.
    previous = os.environ.get("TORCH_CPP_LOG_LEVEL")
    os.environ["TORCH_CPP_LOG_LEVEL"] = previous or "ERROR"
    try:
        for process in ranks:
            process.start()
    finally:
        if previous is None:
            del os.environ["TORCH_CPP_LOG_LEVEL"]
    deadline = time.monotonic() + TIMEOUT.total_seconds()
    for process in ranks:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in ranks:
        if process.is_alive():
            process.kill()
            process.join()
    failed = [(rank, process.exitcode) for rank, process in enumerate(ranks) if process.exitcode != 0]
    if failed:
        raise RuntimeError(f"eccl benchmark ({task}): ranks exited with {failed}")
    return json.loads(dist.PrefixStore(task, store).get("results"))


def measure(repeat: int = 200) -> dict[str, float]:
    """Run the distributed benchmarks once, in one pair of ranks; the figures under their keys."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=TIMEOUT)
    results = _run_pair(store, "targets", repeat)
    results["load_average"] = os.getloadavg()[0]
    return results


ROWS = [
    ("all_reduce 64 MiB, 2 ranks: eccl / gloo busbw", "allreduce_64m_busbw_vs_gloo"),
    ("all_reduce 64 MiB, 2 ranks: eccl busbw / memcpy", "allreduce_64m_busbw_vs_memcpy"),
    ("all_reduce 4 KiB-64 MiB: auto / best fixed busbw, min", "allreduce_auto_vs_best_min"),
    ("training step: DDP on 2 ranks / 1 process", "ddp_step_2proc_vs_1proc"),
]


def table(results: dict[str, float]) -> str:
    width = max(len(label) for label, _ in ROWS)
    lines = [f"{'figure':<{width}}  {'value':>8}  {'target':>7}  met", "-" * (width + 25)]
    for label, key in ROWS:
        target = TARGETS[key]
        value = results[key]
        lines.append(
            f"{label:<{width}}  {value:7.2f}x  {str(target):>7}  {'yes' if target.met(value) else 'NO'}"
        )
    lines.append("")
    lines.append("all_reduce bus bandwidth, GB/s, by size (2 ranks, float32)")
    lines.append(f"{'algorithm':<10}" + "".join(f"{label:>8}" for label in SIZES))
    for algorithm in ALGORITHMS:
        cells = "".join(f"{results[f'allreduce_{label}_busbw_{algorithm}_gbps']:8.2f}" for label in SIZES)
        lines.append(f"{algorithm:<10}{cells}")
    cells = "".join(f"{results[f'allreduce_{label}_auto_vs_best']:8.2f}" for label in SIZES)
    lines.append(f"{'auto/best':<10}{cells}")
    lines.append(
        f"(context: 64 MiB all_reduce busbw eccl {results['allreduce_64m_eccl_busbw_gbps']:.2f} GB/s, "
        f"gloo {results['allreduce_64m_gloo_busbw_gbps']:.2f} GB/s; memcpy {results['memcpy_gbps']:.2f} GB/s; "
        f"step DDP {results['ddp_step_2proc_us'] / 1e3:.1f} ms, one process "
        f"{results['ddp_step_1proc_us'] / 1e3:.1f} ms; load average {results['load_average']:.1f} "
        f"on {os.cpu_count()} cores)"
    )
    return "\n".join(lines)
