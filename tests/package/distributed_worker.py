"""One rank of a test_distributed.py scenario: runs the scenario's checks and writes their results as JSON.

Run as `python distributed_worker.py SCENARIO RANK WORLD STORE_FILE OUT_DIR`, one process per rank, started
together (test_distributed.py does it); the ranks meet through a FileStore at STORE_FILE. Each check is a
function that raises on failure; the result of every check (ok, and the error's text) goes into
OUT_DIR/rank<RANK>.json, rewritten after each check, so a rank that dies or hangs still leaves what it did.
A scenario's checks are named by `check_names(scenario, world)`, which the tests parametrize over.

The worker imports `torch_ember` and nothing else of ours: that alone must make "eccl" usable.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch_ember  # noqa: F401 (registers the ember device and eccl)

R = dist.ReduceOp
FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
DTYPES = [*FLOATS, torch.int64, torch.int32, torch.uint8, torch.bool]
REDUCTIONS = ["SUM", "AVG", "PRODUCT", "MIN", "MAX"]
SMALL = 37  # one chunk, not a multiple of any world size
# Several MiB: the default all_reduce takes the ring (2 ranks: > 4 MiB), the chunks wrap the slots.
LARGE_BYTES = 5 * 1024 * 1024 + 40
MEDIUM_BYTES = 3 * 1024 * 1024 + 8  # several chunks, still one-shot by default with 2 ranks
FAULT_TIMEOUT_S = 3.0
STALL_S = 6.0
LATE_S = 0.6  # how late a peer comes to an asynchronous collective


def short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def numel_for(nbytes: int, dtype: torch.dtype) -> int:
    return nbytes // torch.empty((), dtype=dtype).element_size() + 3


def reductions_for(dtype: torch.dtype) -> list[str]:
    # AVG needs a floating dtype (eccl refuses the others, as a division would have to round).
    return REDUCTIONS if dtype.is_floating_point else [op for op in REDUCTIONS if op != "AVG"]


def sample(n: int, dtype: torch.dtype, rank: int, salt: int = 0) -> torch.Tensor:
    """Integer-valued data in [-4, 4] (uint8: [0, 8]): sums and products of a few ranks are exact in every
    dtype, so eccl and gloo must agree however each orders its arithmetic; every element differs from its
    neighbours, so a misplaced block shows."""
    g = torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt * 5
    if dtype == torch.bool:
        return (g % 3) == 0
    if dtype == torch.uint8:
        return (g % 9).to(dtype)
    return (g % 9 - 4).to(dtype)


# --- the checks of each scenario ----------------------------------------------------------------------


def comparison_plan(world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    """Every collective, eccl on ember tensors against gloo on the same CPU tensors."""
    plan: list[tuple[str, Callable[[Ctx], None]]] = []

    def add(name: str, fn: Callable[[Ctx], None]) -> None:
        plan.append((name, fn))

    # Small (one chunk): every collective, dtype and reduction.
    for dtype in DTYPES:
        tag = f"{short(dtype)}-small"
        for op in reductions_for(dtype):
            add(
                f"all_reduce[{op}-{tag}]",
                lambda c, d=dtype, o=op: c.all_reduce(d, o, SMALL),
            )
        add(f"broadcast[{tag}]", lambda c, d=dtype: c.broadcast(d, SMALL))
        add(f"all_gather[{tag}]", lambda c, d=dtype: c.all_gather(d, SMALL))
        add(
            f"all_gather_into_tensor[{tag}]",
            lambda c, d=dtype: c.all_gather_into_tensor(d, SMALL),
        )
        add(
            f"all_to_all_single[{tag}]",
            lambda c, d=dtype: c.all_to_all_single(d, SMALL, False),
        )
        add(
            f"all_to_all_single[uneven-{tag}]",
            lambda c, d=dtype: c.all_to_all_single(d, SMALL, True),
        )
        add(f"send_recv[{tag}]", lambda c, d=dtype: c.send_recv(d, SMALL))
        add(f"gather[{tag}]", lambda c, d=dtype: c.gather(d, SMALL))
        add(f"scatter[{tag}]", lambda c, d=dtype: c.scatter(d, SMALL))
        add(f"all_gather[uneven-{tag}]", lambda c, d=dtype: c.all_gather_uneven(d, SMALL))
        add(f"all_to_all[list-{tag}]", lambda c, d=dtype: c.all_to_all_list(d, SMALL, False))
        add(f"all_to_all[list-uneven-{tag}]", lambda c, d=dtype: c.all_to_all_list(d, SMALL, True))
        for op in ["SUM", "MAX"] + (["AVG"] if dtype.is_floating_point else []):
            add(f"reduce[{op}-{tag}]", lambda c, d=dtype, o=op: c.reduce(d, o, SMALL))
            add(
                f"reduce_scatter_tensor[{op}-{tag}]",
                lambda c, d=dtype, o=op: c.reduce_scatter_tensor(d, o, SMALL),
            )
            add(
                f"reduce_scatter[list-{op}-{tag}]",
                lambda c, d=dtype, o=op: c.reduce_scatter_list(d, SMALL, o),
            )
    add(
        "all_reduce[SUM-float32-one_element]",
        lambda c: c.all_reduce(torch.float32, "SUM", 1),
    )
    add("all_reduce[SUM-float32-empty]", lambda c: c.all_reduce(torch.float32, "SUM", 0))

    # Large (several MiB: many chunks, the slots wrap; all_reduce takes the ring by default), in fewer
    # dtypes: what a dtype changes is the arithmetic, which the small cases cover.
    def large(d: torch.dtype, nbytes: int = LARGE_BYTES) -> int:
        return numel_for(nbytes, d)

    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        add(
            f"all_reduce[SUM-{short(dtype)}-large]",
            lambda c, d=dtype: c.all_reduce(d, "SUM", large(d)),
        )
    for op in ("AVG", "MAX"):
        add(
            f"all_reduce[{op}-float32-large]",
            lambda c, o=op: c.all_reduce(torch.float32, o, large(torch.float32)),
        )
    add(
        "all_reduce[SUM-float32-medium]",
        lambda c: c.all_reduce(torch.float32, "SUM", large(torch.float32, MEDIUM_BYTES)),
    )
    f32 = torch.float32
    add("broadcast[float32-large]", lambda c: c.broadcast(f32, large(f32)))
    add("reduce[SUM-float32-large]", lambda c: c.reduce(f32, "SUM", large(f32)))
    add(
        "all_gather_into_tensor[float32-large]",
        lambda c: c.all_gather_into_tensor(f32, large(f32) // c.world),
    )
    add(
        "reduce_scatter_tensor[SUM-float32-large]",
        lambda c: c.reduce_scatter_tensor(f32, "SUM", large(f32) // c.world),
    )
    add(
        "all_to_all_single[uneven-float32-large]",
        lambda c: c.all_to_all_single(f32, large(f32), True),
    )
    add("send_recv[float32-large]", lambda c: c.send_recv(f32, large(f32)))
    add("gather[float32-large]", lambda c: c.gather(f32, large(f32) // c.world))
    add("scatter[float32-large]", lambda c: c.scatter(f32, large(f32) // c.world))
    add("gather[uneven-float32-large]", lambda c: c.gather(f32, large(f32) // c.world, uneven=True))
    add("scatter[uneven-float32-large]", lambda c: c.scatter(f32, large(f32) // c.world, uneven=True))
    add("gather[uneven-int64-small]", lambda c: c.gather(torch.int64, SMALL, uneven=True))
    add("scatter[uneven-int64-small]", lambda c: c.scatter(torch.int64, SMALL, uneven=True))
    add("all_gather[uneven-float32-large]", lambda c: c.all_gather_uneven(f32, large(f32) // c.world))
    add("all_to_all[list-uneven-float32-large]", lambda c: c.all_to_all_list(f32, large(f32), True))
    add("send_recv[tags_match_by_tag_not_order]", lambda c: c.send_recv_tags(SMALL))
    add(
        "send_recv[tags_match_by_tag_not_order-large]",
        lambda c: c.send_recv_tags(large(torch.float32)),
    )
    add("send_recv[any_source-by_tag]", lambda c: c.recv_any_source())
    add("coalesced[batch_isend_irecv-ring]", lambda c: c.batch_isend_irecv(1000, recv_first=False))
    # More than a channel holds (4 chunks), every rank sending first: the batch's sends and receives must
    # progress together.
    add(
        "coalesced[batch_isend_irecv-ring-large-sends_first]",
        lambda c: c.batch_isend_irecv(large(torch.float64), recv_first=False),
    )
    add(
        "coalesced[batch_isend_irecv-ring-large-recvs_first]",
        lambda c: c.batch_isend_irecv(large(torch.float64), recv_first=True),
    )
    add(
        "reduce_scatter[list-uneven-SUM-int64-small]",
        lambda c: c.reduce_scatter_uneven(torch.int64, SMALL, "SUM"),
    )
    add(
        "reduce_scatter[list-uneven-AVG-float32-large]",
        lambda c: c.reduce_scatter_uneven(f32, large(f32) // c.world, "AVG"),
    )
    add(
        "reduce_scatter[list-SUM-float32-large]",
        lambda c: c.reduce_scatter_list(f32, large(f32) // c.world, "SUM"),
    )
    add("barrier[waits_for_the_late_rank]", lambda c: c.barrier())
    add(
        "coalesced[_coalescing_manager-all_reduce]",
        lambda c: c.coalesced_all_reduce(async_ops=False),
    )
    add(
        "coalesced[_coalescing_manager-all_reduce-async]",
        lambda c: c.coalesced_all_reduce(async_ops=True),
    )
    add("coalesced[all_reduce_coalesced]", lambda c: c.all_reduce_coalesced())
    add(
        "coalesced[_coalescing_manager-all_gather_into_tensor]",
        lambda c: c.coalesced_all_gather(),
    )
    add(
        "coalesced[_coalescing_manager-reduce_scatter_tensor]",
        lambda c: c.coalesced_reduce_scatter(),
    )
    add("coalesced[all_gather_coalesced]", lambda c: c.all_gather_coalesced())
    return plan


def async_plan() -> list[tuple[str, Callable[[Ctx], None]]]:
    return [
        (
            "async[returns_before_done_wait_orders_the_stream]",
            lambda c: c.async_returns_early(),
        ),
        (
            "async[current_stream_busy_delays_the_collective_not_the_host]",
            lambda c: c.async_after_busy_stream(),
        ),
        (
            "async[compute_proceeds_during_the_collective]",
            lambda c: c.compute_during_collective(),
        ),
        (
            "async[in_flight_memory_not_reused]",
            lambda c: c.in_flight_memory_not_reused(),
        ),
        ("async[get_future_holds_the_result]", lambda c: c.future_result()),
    ]


def host_error_plan() -> list[tuple[str, Callable[[Ctx], None]]]:
    return [
        ("errors[wrong_device]", lambda c: c.wrong_device()),
        ("errors[BAND_refused]", lambda c: c.unsupported_op(R.BAND, "BAND")),
        (
            "errors[PREMUL_SUM_refused]",
            lambda c: c.unsupported_op(dist._make_nccl_premul_sum(2.0), "PREMUL_SUM"),
        ),
        ("errors[AVG_of_int_refused]", lambda c: c.avg_of_int()),
        ("errors[non_contiguous_refused]", lambda c: c.non_contiguous()),
        (
            "errors[cpu_tensor_to_eccl_only_group]",
            lambda c: c.cpu_tensor_to_eccl_group(),
        ),
        ("errors[all_to_all_single_split_sum_refused]", lambda c: c.split_sum()),
        (
            "errors[all_gather_coalesced_short_output_refused]",
            lambda c: c.all_gather_coalesced_short_output(),
        ),
        (
            "errors[group_works_after_refusals]",
            lambda c: c.all_reduce(torch.float32, "SUM", SMALL),
        ),
    ]


def mismatch_plan() -> list[tuple[str, Callable[[Ctx], None]]]:
    # Last: each aborts a group of its own, whose communication stream stays failed.
    return [
        ("mismatch[sizes_disagree_on_every_rank]", lambda c: c.mismatch("numel")),
        ("mismatch[dtypes_disagree_on_every_rank]", lambda c: c.mismatch("dtype")),
        (
            "mismatch[all_to_all_single_output_split_sizes_disagree_on_every_rank]",
            lambda c: c.mismatch("output_split_sizes"),
        ),
        (
            "mismatch[a_failed_group_refuses_the_next_call]",
            lambda c: c.failed_group_refuses(),
        ),
        (
            "mismatch[the_default_group_still_works]",
            lambda c: c.all_reduce_local(torch.float32, "SUM", SMALL),
        ),
    ]


def training_plan() -> list[tuple[str, Callable[[Ctx], None]]]:
    return [
        ("init[device_id_alone_picks_eccl]", lambda c: c.backend_is_eccl()),
        (
            "errors[cpu_tensor_to_eccl_only_default_group]",
            lambda c: c.cpu_tensor_to_default_group(),
        ),
        ("objects[gather_scatter_all_gather_broadcast_on_eccl_alone]", lambda c: c.object_collectives()),
        ("training[DDP_matches_full_batch_cpu]", lambda c: c.ddp()),
        ("training[FSDP2_matches_full_batch_cpu]", lambda c: c.fsdp2()),
        ("dtensor[distribute_tensor_scatters_from_rank_0]", lambda c: c.distribute_tensor()),
    ]


def fault_plan(kind: str) -> list[tuple[str, Callable[[Ctx], None]]]:
    return [
        # EMBER_ECCL_ALGO=one_shot in these jobs: large all_reduces without the ring.
        (
            "init[eccl_by_name]-one_shot[all_reduce-SUM-float32-large]",
            lambda c: c.all_reduce_local(torch.float32, "SUM"),
        ),
        ("one_shot[all_reduce-AVG-bfloat16-large]", lambda c: c.all_reduce_local(torch.bfloat16, "AVG")),
        (f"fault[{kind}]", lambda c: c.fault(kind)),
    ]


def plan_for(scenario: str, world: int) -> list[tuple[str, Callable[[Ctx], None]]]:
    if scenario == "collectives":
        # The comparisons need gloo; then the default group is made again, from the device alone.
        again = [("init[again_from_device_id_alone]", lambda c: c.reinit_from_device_id())]
        return (
            comparison_plan(world)
            + async_plan()
            + host_error_plan()
            + again
            + training_plan()
            + mismatch_plan()
        )
    if scenario == "collectives_ring":
        return comparison_plan(world) + mismatch_plan()
    if scenario in ("killed", "stalled"):
        return fault_plan(scenario)
    raise ValueError(scenario)


def check_names(scenario: str, world: int) -> list[str]:
    return [name for name, _ in plan_for(scenario, world)]


# --- the checks -----------------------------------------------------------------------------------------


def same(actual: torch.Tensor, expected: torch.Tensor, what: str = "") -> None:
    actual = actual.cpu()
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, (
        what,
        actual,
        expected,
    )
    if actual.dtype.is_floating_point:
        close(actual, expected, 1e-6 if actual.dtype.itemsize >= 4 else 1e-3, 0.0, what)
    elif not torch.equal(actual, expected):
        bad = (actual != expected).nonzero()[:5].flatten().tolist()
        raise AssertionError(f"{what} differs at {bad}: {actual.flatten()[bad]} vs {expected.flatten()[bad]}")


def close(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float, what: str = "") -> None:
    # Not torch.testing.assert_close: its first call imports for seconds, in every rank.
    a, e = actual.double(), expected.double()
    bad = ((a - e).abs() > atol + rtol * e.abs()).nonzero()[:5].flatten().tolist()
    assert not bad, f"{what} differs at {bad}: {a.flatten()[bad].tolist()} vs {e.flatten()[bad].tolist()}"


def raises(fn: Callable[[], object], *needles: str) -> str:
    try:
        fn()
    except RuntimeError as error:
        message = str(error)
    else:
        raise AssertionError(f"no error (expected one naming {needles})")
    missing = [n for n in needles if n not in message]
    assert not missing, f"the error does not name {missing}: {message[:600]}"
    return message


class Ctx:
    def __init__(self, scenario: str, rank: int, world: int) -> None:
        self.scenario, self.rank, self.world = scenario, rank, world
        self.device = torch.device("ember", rank % 2)

    def ember(self, t: torch.Tensor) -> torch.Tensor:
        return t.to(self.device)

    # Collectives against gloo: the same call on CPU tensors (gloo) and on ember tensors (eccl).

    def all_reduce(self, dtype: torch.dtype, op: str, n: int) -> None:
        cpu = sample(n, dtype, self.rank)
        if op == "PRODUCT" and dtype != torch.bool:
            cpu = cpu.clamp(-2, 2) if dtype != torch.uint8 else cpu % 3  # no overflow over 3 ranks
        dev = self.ember(cpu)
        dist.all_reduce(cpu, op=getattr(R, op))
        dist.all_reduce(dev, op=getattr(R, op))
        same(dev, cpu)

    def broadcast(self, dtype: torch.dtype, n: int) -> None:
        src = self.world - 1
        cpu = sample(n, dtype, self.rank)
        dev = self.ember(cpu)
        dist.broadcast(cpu, src=src)
        dist.broadcast(dev, src=src)
        same(dev, cpu)
        same(dev, sample(n, dtype, src))

    def reduce(self, dtype: torch.dtype, op: str, n: int) -> None:
        dst = 1
        cpu = sample(n, dtype, self.rank)
        mine = cpu.clone()
        dev = self.ember(cpu)
        dist.reduce(cpu, dst=dst, op=getattr(R, op))
        dist.reduce(dev, dst=dst, op=getattr(R, op))
        # The result is defined on dst; eccl leaves the other ranks' tensors as they were.
        same(dev, cpu if self.rank == dst else mine)

    def all_gather(self, dtype: torch.dtype, n: int) -> None:
        cpu_in = sample(n, dtype, self.rank)
        cpu_out = [torch.empty_like(cpu_in) for _ in range(self.world)]
        dev_out = [torch.empty(n, dtype=dtype, device=self.device) for _ in range(self.world)]
        dist.all_gather(cpu_out, cpu_in)
        dist.all_gather(dev_out, self.ember(cpu_in))
        for r in range(self.world):
            same(dev_out[r], cpu_out[r], f"block {r}")

    def all_gather_into_tensor(self, dtype: torch.dtype, n: int) -> None:
        cpu_in = sample(n, dtype, self.rank)
        cpu_out = torch.empty(self.world * n, dtype=dtype)
        dev_out = torch.empty(self.world * n, dtype=dtype, device=self.device)
        dist.all_gather_into_tensor(cpu_out, cpu_in)
        dist.all_gather_into_tensor(dev_out, self.ember(cpu_in))
        same(dev_out, cpu_out)

    def reduce_scatter_tensor(self, dtype: torch.dtype, op: str, n: int) -> None:
        cpu_in = sample(self.world * n, dtype, self.rank)
        cpu_out = torch.empty(n, dtype=dtype)
        dev_out = torch.empty(n, dtype=dtype, device=self.device)
        dist.reduce_scatter_tensor(cpu_out, cpu_in, op=getattr(R, op))
        dist.reduce_scatter_tensor(dev_out, self.ember(cpu_in), op=getattr(R, op))
        same(dev_out, cpu_out)

    def reduce_scatter_list(self, dtype: torch.dtype, n: int, op: str) -> None:
        cpu_in = [sample(n, dtype, self.rank, salt=r) for r in range(self.world)]
        cpu_out = torch.empty(n, dtype=dtype)
        dev_out = torch.empty(n, dtype=dtype, device=self.device)
        dist.reduce_scatter(cpu_out, cpu_in, op=getattr(R, op))
        dist.reduce_scatter(dev_out, [self.ember(t) for t in cpu_in], op=getattr(R, op))
        same(dev_out, cpu_out)

    def reduce_scatter_uneven(self, dtype: torch.dtype, n: int, op: str) -> None:
        # NCCL's reduce_scatter takes outputs of different sizes; gloo's does not: the expectation is local.
        sizes = self.uneven_sizes(n)
        blocks = [self.ember(sample(k, dtype, self.rank, salt=q)) for q, k in enumerate(sizes)]
        dev_out = torch.empty(sizes[self.rank], dtype=dtype, device=self.device)
        dist.reduce_scatter(dev_out, blocks, op=getattr(R, op))
        k = sizes[self.rank]
        expected = sum(sample(k, dtype, r, salt=self.rank).double() for r in range(self.world))
        if op == "AVG":
            expected = expected / self.world
        same(dev_out, expected.to(dtype))

    def all_to_all_single(self, dtype: torch.dtype, n: int, uneven: bool) -> None:
        cols = 3  # splits count rows
        rows_each = max(1, n // (cols * self.world))
        if uneven:
            # Rank r sends (r + q) % 3 * rows_each + q rows to rank q: some blocks are empty-ish, all differ.
            def rows(r: int, q: int) -> int:
                return (r + q) % 3 * rows_each + q

            in_splits = [rows(self.rank, q) for q in range(self.world)]
            out_splits = [rows(q, self.rank) for q in range(self.world)]
        else:
            in_splits = out_splits = None
        sent = sum(in_splits) if in_splits else rows_each * self.world
        received = sum(out_splits) if out_splits else rows_each * self.world
        cpu_in = sample(sent * cols, dtype, self.rank).view(sent, cols)
        cpu_out = torch.empty(received, cols, dtype=dtype)
        dev_out = torch.empty(received, cols, dtype=dtype, device=self.device)
        dist.all_to_all_single(cpu_out, cpu_in, out_splits, in_splits)
        dist.all_to_all_single(dev_out, self.ember(cpu_in), out_splits, in_splits)
        same(dev_out, cpu_out)

    def send_recv(self, dtype: torch.dtype, n: int) -> None:
        # A ring: rank 0 sends first, the others receive first (a send waits for room at its peer).
        to, frm = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        for make in (lambda t: t, self.ember):
            out = make(sample(n, dtype, self.rank))
            into = make(torch.zeros(n, dtype=dtype))
            if self.rank == 0:
                dist.send(out, to)
                dist.recv(into, frm)
            else:
                dist.recv(into, frm)
                dist.send(out, to)
            same(into, sample(n, dtype, frm))

    def uneven_sizes(self, n: int) -> list[int]:
        """Elements per rank for the uneven cases: all differ, rank 1's is empty."""
        return [0 if r == 1 else n + 5 * r for r in range(self.world)]

    def gather(self, dtype: torch.dtype, n: int, uneven: bool = False) -> None:
        dst = 1
        sizes = self.uneven_sizes(n) if uneven else [n] * self.world
        mine = sample(sizes[self.rank], dtype, self.rank)
        dev_out = [torch.full((k,), 3, dtype=dtype, device=self.device) for k in sizes]
        dist.gather(self.ember(mine), dev_out if self.rank == dst else None, dst=dst)
        if uneven:  # gloo takes one size: the expectation is every rank's known input
            expected = [sample(k, dtype, r) for r, k in enumerate(sizes)]
        else:
            expected = [torch.empty(n, dtype=dtype) for _ in sizes]
            dist.gather(mine, expected if self.rank == dst else None, dst=dst)
        if self.rank == dst:
            for r in range(self.world):
                same(dev_out[r], expected[r], f"block {r}")
        else:  # the outputs of the other ranks are not touched
            for t in dev_out:
                same(t, torch.full_like(t, 3, device="cpu"))

    def scatter(self, dtype: torch.dtype, n: int, uneven: bool = False) -> None:
        src = self.world - 1
        sizes = self.uneven_sizes(n) if uneven else [n] * self.world
        blocks = [sample(k, dtype, src, salt=r) for r, k in enumerate(sizes)]
        dev_out = torch.empty(sizes[self.rank], dtype=dtype, device=self.device)
        dev_in = [self.ember(b) for b in blocks] if self.rank == src else None
        dist.scatter(dev_out, dev_in, src=src)
        if uneven:
            expected = blocks[self.rank]
        else:
            expected = torch.empty(n, dtype=dtype)
            dist.scatter(expected, blocks if self.rank == src else None, src=src)
        same(dev_out, expected)

    def all_gather_uneven(self, dtype: torch.dtype, n: int) -> None:
        # NCCL's all_gather takes outputs of different sizes; gloo's does not: the expectation is local.
        sizes = self.uneven_sizes(n)
        dev_out = [torch.empty(k, dtype=dtype, device=self.device) for k in sizes]
        dist.all_gather(dev_out, self.ember(sample(sizes[self.rank], dtype, self.rank)))
        for r, k in enumerate(sizes):
            same(dev_out[r], sample(k, dtype, r), f"block {r}")

    def all_to_all_list(self, dtype: torch.dtype, n: int, uneven: bool) -> None:
        # Uneven lists against gloo's all_to_all_single on the same blocks laid end to end (gloo's
        # all_to_all takes one size).
        def count(r: int, q: int) -> int:
            return (r + 2 * q) % 3 * (n // 3) + q if uneven else n

        blocks = [sample(count(self.rank, q), dtype, self.rank, salt=q) for q in range(self.world)]
        dev_out = [
            torch.empty(count(q, self.rank), dtype=dtype, device=self.device) for q in range(self.world)
        ]
        dist.all_to_all(dev_out, [self.ember(b) for b in blocks])
        out_splits = [count(q, self.rank) for q in range(self.world)]
        expected = torch.empty(sum(out_splits), dtype=dtype)
        dist.all_to_all_single(
            expected, torch.cat(blocks), out_splits, [count(self.rank, q) for q in range(self.world)]
        )
        for r, e in enumerate(expected.split(out_splits)):
            same(dev_out[r], e, f"block {r}")

    def send_recv_tags(self, n: int) -> None:
        # Rank 0 sends tag 1, then tag 2; rank 1 receives tag 2 first: matched by tag, not by order
        # (eccl keeps the tag-1 message, read on the way, until its receive), as gloo does.
        if self.rank > 1:
            return
        for make in (lambda t: t, self.ember):
            first, second = make(sample(n, torch.float32, 0, salt=1)), make(sample(7, torch.int64, 0, salt=2))
            if self.rank == 0:
                works = [dist.isend(first, 1, tag=1), dist.isend(second, 1, tag=2)]
                for w in works:
                    w.wait()
            else:
                got_second = make(torch.zeros(7, dtype=torch.int64))
                got_first = make(torch.zeros(n, dtype=torch.float32))
                dist.recv(got_second, 0, tag=2)
                dist.recv(got_first, 0, tag=1)
                same(got_second, sample(7, torch.int64, 0, salt=2), "tag 2")
                same(got_first, sample(n, torch.float32, 0, salt=1), "tag 1")
        torch.ember.synchronize()

    def recv_any_source(self) -> None:
        # Every other rank sends rank 0 a tag-5 message, then a tag-3 one; rank 0 receives the tag-3
        # messages first, from whichever rank comes first, then the tag-5 ones; recv returns the sender.
        for make in (lambda t: t, self.ember):
            if self.rank == 0:
                for tag in (3, 5):
                    senders = []
                    for _ in range(self.world - 1):
                        into = make(torch.zeros(4, dtype=torch.int32))
                        sender = dist.recv(into, tag=tag)
                        same(into, torch.full((4,), 100 * sender + tag, dtype=torch.int32), f"from {sender}")
                        senders.append(sender)
                    assert sorted(senders) == list(range(1, self.world)), senders
            else:
                works = [
                    dist.isend(make(torch.full((4,), 100 * self.rank + tag, dtype=torch.int32)), 0, tag=tag)
                    for tag in (5, 3)
                ]
                for work in works:
                    work.wait()
        torch.ember.synchronize()

    def batch_isend_irecv(self, n: int, recv_first: bool) -> None:
        to, frm = (self.rank + 1) % self.world, (self.rank - 1) % self.world
        for make in (lambda t: t, self.ember):
            out = make(sample(n, torch.float64, self.rank))
            into = make(torch.zeros(n, dtype=torch.float64))
            ops = [dist.P2POp(dist.isend, out, to), dist.P2POp(dist.irecv, into, frm)]
            for work in dist.batch_isend_irecv(ops[::-1] if recv_first else ops):
                work.wait()
            same(into, sample(n, torch.float64, frm))

    def barrier(self) -> None:
        if self.rank == 0:
            time.sleep(LATE_S)
        start = time.monotonic()
        dist.barrier(device_ids=[self.device.index])
        waited = time.monotonic() - start
        if self.rank != 0:
            assert waited > LATE_S * 0.6, f"barrier returned after {waited:.3f} s, before rank 0 came"

    def coalesced_all_reduce(self, async_ops: bool) -> None:
        tensors = [sample(n, torch.float32, self.rank, salt=n) for n in (5, 1000, 70_000)]
        expected = [t.clone() for t in tensors]
        for t in expected:
            dist.all_reduce(t)
        dev = [self.ember(t) for t in tensors]
        with dist._coalescing_manager(device=self.device, async_ops=async_ops) as cm:
            for t in dev:
                dist.all_reduce(t)
        if async_ops:
            cm.wait()
        for t, e in zip(dev, expected, strict=True):
            same(t, e)

    def all_reduce_coalesced(self) -> None:
        tensors = [sample(n, torch.float64, self.rank, salt=n) for n in (3, 300)]
        dev = [self.ember(t) for t in tensors]
        dist.all_reduce_coalesced(tensors, op=R.MAX)
        dist.all_reduce_coalesced(dev, op=R.MAX)
        for t, e in zip(dev, tensors, strict=True):
            same(t, e)

    def coalesced_all_gather(self) -> None:
        inputs = [sample(n, torch.int32, self.rank, salt=n) for n in (4, 999)]
        expected = [torch.empty(self.world * t.numel(), dtype=t.dtype) for t in inputs]
        for out, t in zip(expected, inputs, strict=True):
            dist.all_gather_into_tensor(out, t)
        outs = [torch.empty_like(e, device=self.device) for e in expected]
        with dist._coalescing_manager(device=self.device):
            for out, t in zip(outs, inputs, strict=True):
                dist.all_gather_into_tensor(out, self.ember(t))
        for out, e in zip(outs, expected, strict=True):
            same(out, e)

    def all_gather_coalesced(self) -> None:
        # outputs[r][i] receives input i of rank r (sizes differ by input, not by rank).
        inputs = [sample(n, torch.float64, self.rank, salt=n) for n in (3, 1000, 70_000)]
        expected = [[torch.empty_like(t) for t in inputs] for _ in range(self.world)]
        dist.all_gather_coalesced(expected, inputs)
        outs = [[torch.empty_like(t, device=self.device) for t in inputs] for _ in range(self.world)]
        dist.all_gather_coalesced(outs, [self.ember(t) for t in inputs])
        for r in range(self.world):
            for i, e in enumerate(expected[r]):
                same(outs[r][i], e, f"rank {r}, input {i}")

    def coalesced_reduce_scatter(self) -> None:
        inputs = [sample(self.world * n, torch.float32, self.rank, salt=n) for n in (4, 999)]
        expected = [torch.empty(t.numel() // self.world) for t in inputs]
        for out, t in zip(expected, inputs, strict=True):
            dist.reduce_scatter_tensor(out, t)
        outs = [torch.empty_like(e, device=self.device) for e in expected]
        with dist._coalescing_manager(device=self.device):
            for out, t in zip(outs, inputs, strict=True):
                dist.reduce_scatter_tensor(out, self.ember(t))
        for out, e in zip(outs, expected, strict=True):
            same(out, e)

    # Without gloo: the expectation computed here from every rank's (known) input.

    def all_reduce_local(self, dtype: torch.dtype, op: str, n: int = 0) -> None:
        n = n or numel_for(LARGE_BYTES, dtype)
        inputs = [sample(n, dtype, r) for r in range(self.world)]
        expected = torch.stack([t.double() for t in inputs]).sum(0)
        if op == "AVG":
            expected = expected / self.world
        dev = self.ember(inputs[self.rank])
        dist.all_reduce(dev, op=getattr(R, op))
        same(dev, expected.to(dtype))

    # Asynchronous work against the streams.

    def async_returns_early(self) -> None:
        t = self.ember(sample(1000, torch.float32, self.rank))
        if self.rank == 1:
            time.sleep(LATE_S)  # the peer comes late: rank 0's collective waits on its stream
        start = time.monotonic()
        work = dist.all_reduce(t, async_op=True)
        issued = time.monotonic() - start
        if self.rank == 0:
            assert issued < LATE_S / 3, f"all_reduce(async_op=True) took {issued:.3f} s"
            assert not work.is_completed(), "completed before the peer came"
            work.wait()
            waited = time.monotonic() - start
            assert waited < LATE_S / 3, f"work.wait() blocked the host ({waited:.3f} s)"
            total = (t * 1).sum()  # queued on the current stream: runs after the collective
            value = total.item()
            assert time.monotonic() - start > LATE_S * 0.6, "the current stream did not wait"
        else:
            work.wait()
            value = t.sum().item()
        expected = sum(sample(1000, torch.float32, r) for r in range(self.world)).sum().item()
        assert value == expected, (value, expected)
        torch.ember.synchronize()
        assert work.is_completed()

    def async_after_busy_stream(self) -> None:
        # The collective starts when the caller's stream gets there: rank 1's stream is busy for a while,
        # and neither rank's host waits for it.
        t = self.ember(sample(100, torch.int64, self.rank))
        start = time.monotonic()
        if self.rank == 1:
            torch.ember._sleep(int(LATE_S * 1e6))
        work = dist.all_reduce(t, async_op=True)
        work.wait()
        assert time.monotonic() - start < LATE_S / 3, "the host waited"
        assert not work.is_completed()
        same(t, sum(sample(100, torch.int64, r) for r in range(self.world)))
        assert time.monotonic() - start > LATE_S * 0.6, "the collective did not wait for the busy stream"

    def compute_during_collective(self) -> None:
        t = self.ember(sample(1000, torch.float32, self.rank))
        x = torch.arange(10.0, device=self.device)
        if self.rank == 1:
            time.sleep(LATE_S)
        start = time.monotonic()
        work = dist.all_reduce(t, async_op=True)
        if self.rank == 0:
            y = (x * 2).cpu()  # the default stream is not held up by the collective in flight
            assert time.monotonic() - start < LATE_S / 3, "compute waited for the collective"
            assert not work.is_completed(), "the collective finished before its peer came"
            same(y, torch.arange(10.0) * 2)
        work.wait()
        same(t, sum(sample(1000, torch.float32, r) for r in range(self.world)))

    def in_flight_memory_not_reused(self) -> None:
        n = 4096
        t = self.ember(sample(n, torch.float32, self.rank))
        if self.rank == 1:
            time.sleep(LATE_S)
        work = dist.all_reduce(t, async_op=True)
        address = t.data_ptr()
        if self.rank == 0:
            del t, work  # nothing holds the tensor but the collective in flight
            fresh = [torch.full((n,), 7.0, device=self.device) for _ in range(4)]
            addresses = [f.data_ptr() for f in fresh]
            assert address not in addresses, "the allocator reused memory a collective still writes"
            torch.ember.synchronize()
            for f in fresh:
                same(f, torch.full((n,), 7.0))
        else:
            work.wait()
            same(t, sum(sample(n, torch.float32, r) for r in range(self.world)))
        torch.ember.synchronize()

    def future_result(self) -> None:
        t = self.ember(sample(10, torch.float32, self.rank))
        work = dist.all_reduce(t, async_op=True)
        (value,) = work.get_future().wait()
        same(value, sum(sample(10, torch.float32, r) for r in range(self.world)))

    def reinit_from_device_id(self) -> None:
        dist.destroy_process_group()
        store = f"file://{self.store_file}.device_id"
        dist.init_process_group(
            device_id=torch.device("ember", self.rank),
            init_method=store,
            rank=self.rank,
            world_size=self.world,
        )

    # Refused on the host, at once, on every rank alike.

    def wrong_device(self) -> None:
        other = torch.device("ember", 1 - self.device.index)
        raises(
            lambda: dist.all_reduce(torch.ones(3, device=other)),
            "eccl",
            "all_reduce",
            str(self.device),
        )

    def unsupported_op(self, op: object, name: str) -> None:
        t = torch.ones(3, device=self.device)
        raises(lambda: dist.all_reduce(t, op=op), "eccl", "all_reduce", name)

    def avg_of_int(self) -> None:
        t = torch.ones(3, dtype=torch.int64, device=self.device)
        raises(lambda: dist.all_reduce(t, op=R.AVG), "eccl", "AVG", "floating")

    def non_contiguous(self) -> None:
        t = torch.ones(4, 6, device=self.device).t()
        raises(lambda: dist.all_reduce(t), "eccl", "contiguous")

    def all_gather_coalesced_short_output(self) -> None:
        inputs = [torch.ones(3, device=self.device), torch.ones(2, device=self.device)]
        outs = [[torch.empty(3, device=self.device)] for _ in range(self.world)]
        raises(lambda: dist.all_gather_coalesced(outs, inputs), "eccl", "all_gather_coalesced", "2 inputs")

    def cpu_tensor_to_eccl_group(self) -> None:
        group = dist.new_group(backend="eccl")
        raises(lambda: dist.all_reduce(torch.ones(3), group=group), "cpu")

    def cpu_tensor_to_default_group(self) -> None:
        raises(lambda: dist.all_reduce(torch.ones(3)), "cpu")

    # A collective the ranks disagree on: every rank raises, naming the collective.

    def split_sum(self) -> None:
        t = torch.ones(4, device=self.device)
        raises(
            lambda: dist.all_to_all_single(t, t, [1] * self.world, [2] * self.world),
            "Split sizes doesn't match total dim 0 size",
            "eccl: all_to_all_single",
        )

    def mismatch(self, what: str) -> None:
        group = dist.new_group(backend="eccl")
        dist.all_reduce(torch.ones(2, device=self.device), group=group)  # #1 works
        side = torch.ember.Stream()  # the failure is sticky on the stream that waits: not the default one
        if what == "output_split_sizes":
            # Rank r sends rank q q + r + 1 rows; rank 0 alone expects them in the reverse order (the
            # same total): every rank raises, none hangs or lays the rows out wrong.
            sends = [q + self.rank + 1 for q in range(self.world)]
            expects = [self.rank + r + 1 for r in range(self.world)]
            if self.rank == 0:
                expects.reverse()
            inp = torch.ones(sum(sends), 2, device=self.device)
            out = torch.empty(sum(expects), 2, device=self.device)
            with torch.ember.stream(side):

                def call_and_sync() -> None:
                    dist.all_to_all_single(out, inp, expects, sends, group=group)
                    out.cpu()

                message = raises(
                    call_and_sync,
                    "eccl: all_to_all_single #2",
                    f"({self.world} ranks)",
                    "disagree",
                )
            self.failed_group = group
            # Every rank reaches the same verdict from the agreed descriptors (or saw a peer abort).
            assert "output_split_sizes" in message or "aborted" in message, message
            return
        n = 8 + (self.rank if what == "numel" else 0)
        dtype = torch.float32 if what == "numel" or self.rank == 0 else torch.float64
        t = torch.ones(n, dtype=dtype, device=self.device)
        with torch.ember.stream(side):

            def call_and_sync() -> None:
                dist.all_reduce(t, group=group)
                t.cpu()

            message = raises(
                call_and_sync,
                "eccl: all_reduce #2",
                f"({self.world} ranks)",
                "disagree",
            )
        self.failed_group = group
        word = "elements" if what == "numel" else "Double"
        assert word in message or "aborted" in message, message

    def failed_group_refuses(self) -> None:
        raises(
            lambda: dist.all_reduce(torch.ones(2, device=self.device), group=self.failed_group),
            "eccl: all_reduce",
            "failed earlier",
        )

    def object_collectives(self) -> None:
        # Pickled objects of different lengths travel as ember byte tensors (the group has only eccl):
        # an all_gather of the sizes, then gather, scatter, all_gather and broadcast of the bytes.
        mine = {"rank": self.rank, "pad": "x" * (7 * self.rank)}
        everyone = [{"rank": r, "pad": "x" * (7 * r)} for r in range(self.world)]
        gathered: list[object] = [None] * self.world
        dist.all_gather_object(gathered, mine)
        assert gathered == everyone, gathered
        at_root = [None] * self.world if self.rank == 0 else None
        dist.gather_object(mine, at_root, dst=0)
        assert self.rank != 0 or at_root == everyone, at_root
        mine_back: list[object] = [None]
        src = self.world - 1
        dist.scatter_object_list(mine_back, everyone if self.rank == src else None, src=src)
        assert mine_back == [everyone[self.rank]], mine_back
        shared: list[object] = [mine, self.rank]
        dist.broadcast_object_list(shared, src=src)
        assert shared == [everyone[src], src], shared

    # Training against one process on the full batch.

    def backend_is_eccl(self) -> None:
        assert dist.get_backend() == "eccl", dist.get_backend()

    def _model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))

    def _batches(self) -> Iterator[tuple[torch.Tensor, torch.Tensor, slice]]:
        g = torch.Generator().manual_seed(1)
        per = 6
        for _ in range(3):
            x, y = (
                torch.randn(per * self.world, 8, generator=g),
                torch.randn(per * self.world, 4, generator=g),
            )
            yield x, y, slice(self.rank * per, (self.rank + 1) * per)

    def _train(self, model: torch.nn.Module, reference: torch.nn.Module) -> None:
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
        for x, y, mine in self._batches():
            loss = torch.nn.functional.mse_loss(model(self.ember(x[mine])), self.ember(y[mine]))
            opt.zero_grad()
            loss.backward()
            opt.step()
            ref_loss = torch.nn.functional.mse_loss(reference(x), y)
            ref_opt.zero_grad()
            ref_loss.backward()
            ref_opt.step()

    def _compare(self, state: dict[str, torch.Tensor], reference: torch.nn.Module) -> None:
        ref_state = reference.state_dict()
        assert state.keys() == ref_state.keys()
        moved = False
        for key, value in ref_state.items():
            close(state[key], value, 1e-4, 1e-5, key)
            moved |= not torch.equal(value, self._model().state_dict()[key])
        assert moved, "training did not change the reference"

    def ddp(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        reference = self._model()
        model = DistributedDataParallel(self._model().to(self.device), bucket_cap_mb=0.0002)
        self._train(model, reference)
        self._compare({k: v.cpu() for k, v in model.module.state_dict().items()}, reference)

    def fsdp2(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        reference = self._model()
        model = self._model().to(self.device)
        mesh = init_device_mesh("ember", (self.world,))
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        self._train(model, reference)
        self._compare({k: v.full_tensor().cpu() for k, v in model.state_dict().items()}, reference)

    def distribute_tensor(self) -> None:
        # DTensor's distribute_tensor scatters rank 0's tensor (c10d's scatter: it stopped at "Backend eccl
        # does not support scatter" before eccl had one); full_tensor all-gathers it back. Rank 0's values
        # win: the other ranks pass a tensor of their own.
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("ember", (self.world,))
        full = sample(6 * self.world * 3, torch.float32, 0).view(6 * self.world, 3)
        mine = self.ember(sample(full.numel(), torch.float32, self.rank).view_as(full))
        shard = distribute_tensor(mine, mesh, [Shard(0)])
        same(shard.to_local(), full[6 * self.rank : 6 * (self.rank + 1)])
        same(shard.full_tensor(), full)

    # Faults: the last rank dies, or stalls, inside a collective.

    def fault(self, kind: str) -> None:
        last = self.world - 1
        t = self.ember(sample(numel_for(LARGE_BYTES, torch.float32), torch.float32, self.rank))
        if self.rank == last and kind == "killed":
            torch.ember._sleep(10_000_000)  # its stream is busy: the collective stays queued...
            dist.all_reduce(t, async_op=True)
            time.sleep(0.3)  # ...while the other ranks wait in theirs
            os.kill(os.getpid(), signal.SIGKILL)
        if self.rank == last and kind == "stalled":
            time.sleep(STALL_S)
        start = time.monotonic()
        needles = ["eccl: all_reduce #3", f"({self.world} ranks)"]
        if kind == "killed":
            needles.append(f"rank {last}'s process exited")
            needles.append(f"exited while rank {self.rank} waited for")
        elif self.rank != last:
            needles.append("timed out after")
        else:
            needles.append("aborted")  # it came late: the others had given up

        def call_and_sync() -> None:
            dist.all_reduce(t)
            t.cpu()

        message = raises(call_and_sync, *needles)
        elapsed = time.monotonic() - start
        if self.rank != last:
            limit = FAULT_TIMEOUT_S + 3 if kind == "stalled" else 3
            assert elapsed < limit, f"raised after {elapsed:.1f} s: {message}"
        if kind == "stalled" and self.rank != last:
            assert elapsed > FAULT_TIMEOUT_S * 0.8, f"raised after {elapsed:.1f} s, before the timeout"


# --- running a scenario ---------------------------------------------------------------------------------


def main() -> None:
    scenario, rank, world, store_file, out_dir = (
        sys.argv[1],
        int(sys.argv[2]),
        int(sys.argv[3]),
        *sys.argv[4:6],
    )
    out = Path(out_dir) / f"rank{rank}.json"
    results: dict[str, dict[str, object]] = {"__pid__": {"ok": True, "detail": str(os.getpid())}}
    out.write_text(json.dumps(results))
    ctx = Ctx(scenario, rank, world)
    ctx.store_file = store_file
    torch.ember.set_device(ctx.device)
    init = f"file://{store_file}"
    if scenario in ("collectives", "collectives_ring"):
        dist.init_process_group("cpu:gloo,ember:eccl", init_method=init, rank=rank, world_size=world)
    else:
        dist.init_process_group(
            "eccl",
            init_method=init,
            rank=rank,
            world_size=world,
            timeout=timedelta(seconds=FAULT_TIMEOUT_S),
        )
    for name, fn in plan_for(scenario, world):
        start = time.monotonic()
        try:
            fn(ctx)
            results[name] = {"ok": True, "detail": ""}
        except Exception:
            results[name] = {"ok": False, "detail": traceback.format_exc()[-3000:]}
        results[name]["seconds"] = round(time.monotonic() - start, 3)
        out.write_text(json.dumps(results))
    if scenario not in ("killed", "stalled"):
        dist.destroy_process_group()
    # A failed group's stream stays failed: leave without running exit handlers that would sync it.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
