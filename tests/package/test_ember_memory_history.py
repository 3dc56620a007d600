"""Seeing ember's memory: the profiler's memory columns, and memory history and snapshots.

The device cache reports every allocation and free to the profiler
(`c10::reportMemoryUsageToProfiler`), so `profile_memory=True` fills `device_memory_usage` with
CPU activity alone. `torch.ember.memory._record_memory_history` / `_snapshot` / `_dump_snapshot`
follow `torch.cuda.memory`'s, and the snapshot has CUDA's schema, so `torch.cuda._memory_viz`
reads it.
"""

from __future__ import annotations

import gc
import io
import json
import os
import pickle
import subprocess
import sys
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_ember  # noqa: F401 (registers the ember device)
from torch.cuda import _memory_viz
from torch.profiler import ProfilerActivity, profile

memory = torch.ember.memory  # the functions under test, where users find them
Snapshot = dict[str, Any]
BLOCK_ACTIONS = ("alloc", "free_requested", "free_completed")


@pytest.fixture(autouse=True)
def _clean_history() -> Iterator[None]:
    gc.collect()
    torch.ember.synchronize()
    torch.ember.empty_cache()
    yield
    memory._record_memory_history(None)


def _active_blocks(snapshot: Snapshot, device: int = 0) -> list[dict[str, Any]]:
    return [
        block
        for segment in snapshot["segments"]
        if segment["device"] == device
        for block in segment["blocks"]
        if block["state"] == "active_allocated"
    ]


def _trace(snapshot: Snapshot, device: int = 0) -> list[dict[str, Any]]:
    return snapshot["device_traces"][device]


# --- the profiler -------------------------------------------------------------------------


def test_profile_memory_gives_device_memory_usage_for_ember_operators() -> None:
    x = torch.ones(1000, device="ember")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        y = x * 2  # 4000 bytes, a 4096-byte block
        del y
    muls = [e for e in prof.events() if e.name == "aten::mul" and e.device_memory_usage]
    assert [e.device_memory_usage for e in muls] == [4096]
    assert muls[0].cpu_memory_usage == 0
    # The free came outside any operator: a "[memory]" event of its own, device memory only.
    (free,) = [e for e in prof.events() if e.name == "[memory]" and e.device_memory_usage]
    assert (free.device_memory_usage, free.cpu_memory_usage) == (-4096, 0)


def test_export_memory_timeline_shows_an_ember_training_step(tmp_path: Path) -> None:
    model = torch.nn.Linear(64, 32).to("ember")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(16, 64, device="ember")
    with profile(
        activities=[ProfilerActivity.CPU],
        profile_memory=True,
        record_shapes=True,
        with_stack=True,
    ) as prof:
        for _ in range(2):
            model(x).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    path = tmp_path / "timeline.json"
    with pytest.warns(FutureWarning):  # deprecated in 2.13 in favour of memory history
        prof.export_memory_timeline(str(path), device="ember:0")
    times, sizes = json.loads(path.read_text())
    assert len(times) == len(sizes) > 0
    parameter_bytes = sum(p.nbytes for p in model.parameters())
    # One category holds the parameters throughout; gradients come and go.
    assert all(parameter_bytes in row for row in sizes)
    assert max(sum(row) for row in sizes) > parameter_bytes


# --- history and snapshots ------------------------------------------------------------------


def test_snapshot_matches_the_allocator_counters() -> None:
    memory._record_memory_history("all", stacks="python")
    kept = [torch.empty(n, dtype=torch.uint8, device="ember") for n in (100, 5000, 3 << 20)]
    snapshot = memory._snapshot()
    assert set(snapshot) == {"segments", "device_traces", "allocator_settings"}
    assert len(snapshot["device_traces"]) == torch.ember.device_count()
    blocks = _active_blocks(snapshot)
    assert sum(b["size"] for b in blocks) == torch.ember.memory_allocated(0)
    reserved = sum(s["total_size"] for s in snapshot["segments"] if s["device"] == 0)
    assert reserved == torch.ember.memory_reserved(0)
    # A large block is used whole unless more than 1 MiB would remain (CUDA's rule).
    for tensor, size in zip(kept, (512, 5120, 4 << 20), strict=True):
        (block,) = [b for b in blocks if b["address"] == tensor.data_ptr()]
        assert (block["size"], block["requested_size"]) == (size, tensor.nbytes)
    for segment in snapshot["segments"]:
        assert set(segment) >= {
            "device", "address", "total_size", "allocated_size", "active_size", "requested_size",
            "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks",
        }  # fmt: skip
        assert segment["total_size"] == sum(b["size"] for b in segment["blocks"])
        assert segment["segment_type"] == ("small" if segment["total_size"] == 2 << 20 else "large")
        address = segment["address"]
        for block in segment["blocks"]:
            assert block["address"] == address
            address += block["size"]
    (big,) = [s for s in snapshot["segments"] if s["address"] == kept[2].data_ptr()]
    assert (big["segment_type"], big["total_size"], big["allocated_size"]) == (
        "large",
        4 << 20,
        4 << 20,
    )


def _make_tensor(nbytes: int) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device="ember")


def test_trace_records_each_action_with_address_size_and_stack() -> None:
    memory._record_memory_history("all", stacks="python")
    x = _make_tensor(3 << 20)  # a new large segment
    address = x.data_ptr()
    del x
    torch.ember.empty_cache()
    actions = [
        (e["action"], e["addr"], e["size"]) for e in _trace(memory._snapshot()) if e["action"] != "snapshot"
    ]
    assert actions == [
        ("segment_alloc", address, 4 << 20),
        (
            "alloc",
            address,
            4 << 20,
        ),  # the whole segment: 1 MiB is too little to split off
        ("free_requested", address, 4 << 20),
        ("free_completed", address, 4 << 20),
        ("segment_free", address, 4 << 20),
    ]
    trace = _trace(memory._snapshot())
    assert [e["time_us"] for e in trace] == sorted(e["time_us"] for e in trace)
    assert trace[-1]["action"] == "snapshot"
    alloc = next(e for e in trace if e["action"] == "alloc")
    assert alloc["frames"][0] == {
        "filename": __file__,
        "name": "_make_tensor",
        "line": alloc["frames"][0]["line"],
    }
    assert alloc["frames"][1]["name"] == "test_trace_records_each_action_with_address_size_and_stack"


def test_context_alloc_keeps_no_stack_for_frees() -> None:
    memory._record_memory_history("all", context="alloc", stacks="python")
    x = _make_tensor(1000)
    del x
    trace = _trace(memory._snapshot())
    frames = {e["action"]: bool(e["frames"]) for e in trace}
    assert frames["alloc"] and not frames["free_requested"] and not frames["free_completed"]


def test_max_entries_keeps_only_the_last_entries() -> None:
    _make_tensor(512)  # the small pool has a cached segment: no segment_alloc below
    memory._record_memory_history("all", stacks="python", max_entries=6)
    for i in range(1, 11):
        _make_tensor(i * 512)  # alloc, free_requested, free_completed: freed at once
    trace = _trace(memory._snapshot())
    assert len(trace) == 6
    # The newest six, the snapshot's own mark last (as CUDA's).
    assert [(e["action"], e["size"]) for e in trace] == [
        ("free_requested", 9 * 512),
        ("free_completed", 9 * 512),
        ("alloc", 10 * 512),
        ("free_requested", 10 * 512),
        ("free_completed", 10 * 512),
        ("snapshot", 0),
    ]


def test_disabling_drops_the_history_and_the_snapshot_still_lists_segments() -> None:
    memory._record_memory_history("all", stacks="python")
    x = _make_tensor(1000)
    memory._record_memory_history(None)
    y = _make_tensor(2000)
    snapshot = memory._snapshot()
    assert all(trace == [] for trace in snapshot["device_traces"])
    blocks = {b["address"]: b for b in _active_blocks(snapshot)}
    assert blocks[x.data_ptr()]["frames"] == [] and blocks[y.data_ptr()]["frames"] == []
    assert sum(b["size"] for b in blocks.values()) == torch.ember.memory_allocated(0)


def test_state_keeps_stacks_of_live_blocks_and_one_trace_entry() -> None:
    memory._record_memory_history("state", stacks="python")
    x = _make_tensor(1000)
    for _ in range(3):
        _make_tensor(1000)
    snapshot = memory._snapshot()
    (block,) = [b for b in _active_blocks(snapshot) if b["address"] == x.data_ptr()]
    assert block["frames"][0]["name"] == "_make_tensor"
    assert len(_trace(snapshot)) == 1  # as CUDA: "state" keeps one entry


def test_out_of_memory_is_in_the_trace() -> None:
    memory._record_memory_history("all", stacks="python")
    with pytest.raises(torch.OutOfMemoryError):
        _make_tensor(1 << 40)
    (oom,) = [e for e in _trace(memory._snapshot()) if e["action"] == "oom"]
    assert oom["size"] == 1 << 40
    assert oom["device_free"] == torch.ember.mem_get_info(0)[0]
    assert oom["frames"][0]["name"] == "_make_tensor"


def test_bad_arguments_are_refused_with_the_choices() -> None:
    with pytest.raises(RuntimeError, match="enabled must be 'state', 'all', or None, not 'yes'"):
        memory._record_memory_history("yes")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="stacks must be 'python' or 'all'"):
        memory._record_memory_history("all", stacks="cpp")  # type: ignore[arg-type]


def _leaky_step(model: torch.nn.Module, x: torch.Tensor, losses: list[torch.Tensor]) -> None:
    loss = model(x).square().mean()
    loss.backward()
    losses.append(loss)  # the leak: each loss keeps its graph, and its activations, alive


def test_a_leak_is_found_in_the_snapshot_with_the_allocating_line() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to("ember")
    x = torch.randn(16, 32, device="ember")
    losses: list[torch.Tensor] = []
    memory._record_memory_history("all", stacks="python")

    def leaked_bytes() -> int:
        return sum(
            b["size"]
            for b in _active_blocks(memory._snapshot())
            if any(f["name"] == "_leaky_step" and f["filename"] == __file__ for f in b["frames"])
        )

    _leaky_step(model, x, losses)
    one = leaked_bytes()
    for _ in range(3):
        _leaky_step(model, x, losses)
    assert one > 0
    assert leaked_bytes() == 4 * one  # grows by the same blocks every step
    losses.clear()  # the fix
    assert leaked_bytes() == 0


def test_pytorchs_memory_viz_reads_ember_snapshots(tmp_path: Path) -> None:
    memory._record_memory_history("all", stacks="python")
    kept = _make_tensor(3 << 20)
    _make_tensor(1000)
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())
    summary = _memory_viz.segsum(snapshot)
    reserved = sum(s["total_size"] for s in snapshot["segments"])
    allocated = sum(b["requested_size"] for b in _active_blocks(snapshot))  # segsum's "allocated"
    assert f"segments: {len(snapshot['segments'])}\n" in summary
    assert f"total_reserved: {_memory_viz._format_size(reserved)}\n" in summary
    assert f"total_allocated: {_memory_viz._format_size(allocated)}\n" in summary
    for plot in (_memory_viz.trace_plot, _memory_viz.segment_plot):
        html = plot(snapshot)
        assert html.startswith("<!DOCTYPE html>") or "<html" in html
    # The flame graph inputs: one line per block, its size last; they add up to the reserved bytes.
    lines = _memory_viz.memory(snapshot, format_flamegraph=lambda text: text)
    total = sum(int(line.rsplit(" ", 1)[1]) for line in lines.splitlines())
    assert total == sum(s["total_size"] for s in snapshot["segments"])
    assert any(
        "_make_tensor" in line for line in _memory_viz.segments(snapshot, format_flamegraph=str).splitlines()
    )
    with redirect_stdout(io.StringIO()) as out:
        print(_memory_viz.trace(snapshot))
    assert "alloc" in out.getvalue()
    assert kept.data_ptr() in {b["address"] for b in _active_blocks(snapshot)}


_EXPANDABLE_CHILD = r"""
import json, torch, torch_ember
MiB = 1 << 20
mem = torch.ember.memory
mem._record_memory_history("all", stacks="python")
kept = [torch.empty(n * MiB, dtype=torch.uint8, device="ember") for n in (3, 5)]
del kept[0]
mem.empty_cache()
snapshot = mem._snapshot()
(segment,) = [s for s in snapshot["segments"] if s["segment_type"] == "large"]
print(json.dumps({
    "segment": [segment["is_expandable"], segment["total_size"], segment["allocated_size"]],
    "reserved": mem.memory_reserved(),
    "actions": [[e["action"], e["size"]] for e in snapshot["device_traces"][0]
                if e["action"].startswith("segment")],
    "settings": snapshot["allocator_settings"]["expandable_segments"],
}))
"""


def test_expandable_segments_show_as_one_segment_mapped_and_unmapped() -> None:
    env = {**os.environ, "PYTORCH_ALLOC_CONF": "expandable_segments:True"}
    child = subprocess.run(
        [sys.executable, "-c", _EXPANDABLE_CHILD],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout.strip().splitlines()[-1])
    MiB = 1 << 20
    # 3 MiB then 5 MiB, mapped in 2 MiB chunks at the end of one segment (4 + 6 MiB, each
    # block used whole); the freed first block is a hole that empty_cache cannot unmap (only
    # a free end goes), so the segment keeps 10 MiB, 6 of them allocated.
    assert out["segment"] == [True, 10 * MiB, 6 * MiB]
    assert out["reserved"] == 10 * MiB
    assert out["actions"] == [["segment_map", 4 * MiB], ["segment_map", 6 * MiB]]
    assert out["settings"] is True


def test_each_device_has_its_own_trace_and_segments() -> None:
    memory._record_memory_history("all", stacks="python")
    on_1 = torch.ones(1000, device="ember:1")
    snapshot = memory._snapshot()
    assert len(snapshot["device_traces"]) == 2
    assert [e["addr"] for e in _trace(snapshot, 1) if e["action"] == "alloc"] == [on_1.data_ptr()]
    assert not [e for e in _trace(snapshot, 0) if e["action"] == "alloc"]
    (block,) = _active_blocks(snapshot, device=1)
    assert (block["address"], block["size"]) == (on_1.data_ptr(), 4096)
    reserved = sum(s["total_size"] for s in snapshot["segments"] if s["device"] == 1)
    assert reserved == torch.ember.memory_reserved(1)


def test_stacks_all_adds_cpp_frames_and_clear_history_drops_the_trace() -> None:
    memory._record_memory_history("all", stacks="all")
    x = _make_tensor(1000)
    (block,) = [b for b in _active_blocks(memory._snapshot()) if b["address"] == x.data_ptr()]
    names = [f["name"] for f in block["frames"]]
    assert "ember::Cache::malloc(unsigned long, int, long)" in names  # the C++ stack, symbolized
    assert "_make_tensor" in names  # and the Python one
    memory._record_memory_history("all", stacks="python", clear_history=True)
    # The trace starts again: only this snapshot's own mark; the live block keeps its stack.
    snapshot = memory._snapshot()
    assert [e["action"] for e in _trace(snapshot)] == ["snapshot"]
    (block,) = [b for b in _active_blocks(snapshot) if b["address"] == x.data_ptr()]
    assert "_make_tensor" in [f["name"] for f in block["frames"]]


def test_profile_plot_reads_an_ember_profile() -> None:
    x = torch.ones(1000, device="ember")
    with profile(
        activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True
    ) as prof:
        y = x * 2
        # The profiler ties an allocation to a tensor only through an operator's inputs: `x * 2`
        # allocates its result inside aten::mul (ember's functional kernel, like the CPU's), so y
        # is used once before it is freed.
        y.add_(1)
        del y
    snapshot = _memory_viz._profile_to_snapshot(prof)
    allocs = [e for trace in snapshot["device_traces"] for e in trace if e["action"] == "alloc"]
    assert 4096 in [e["size"] for e in allocs]  # ember's block (the CPU's scalars are there too)
    assert "<html" in _memory_viz.profile_plot(prof).lower()


_THREADS_CHILD = r"""
import threading, torch, torch_ember
mem = torch.ember.memory
mem._record_memory_history("all", stacks="python", max_entries=1000)
model = torch.nn.Linear(64, 64).to("ember")
errors = []

def work(seed):
    try:
        x = torch.randn(32, 64, device="ember")
        for _ in range(20):
            model(x).square().sum().backward()  # autograd's device thread allocates and frees too
            kept = [torch.empty(seed * 1000 + n, device="ember") for n in range(5)]
            del kept
    except Exception as error:
        errors.append(error)

threads = [threading.Thread(target=work, args=(i + 1,)) for i in range(4)]
for t in threads:
    t.start()
snapshots = 0
while any(t.is_alive() for t in threads):
    mem._snapshot()  # takes the cache's lock while the workers allocate
    snapshots += 1
for t in threads:
    t.join()
model.weight.grad = model.bias.grad = None
snapshot = mem._snapshot()
live = sum(b["size"] for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
print(not errors, snapshots > 0, live == torch.ember.memory_allocated(), len(snapshot["device_traces"][0]))
"""


def test_threads_allocating_while_snapshots_are_taken_do_not_deadlock() -> None:
    # Stacks are gathered with the GIL, the walk holds the cache's lock: a child with a hard timeout.
    child = subprocess.run(
        [sys.executable, "-c", _THREADS_CHILD], capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.split() == ["True", "True", "True", "1000"]


def test_a_block_another_stream_may_still_use_is_pending_until_its_event_completes() -> None:
    memory._record_memory_history("all", stacks="python")
    side = torch.ember.Stream()
    y = _make_tensor(1000)
    address = y.data_ptr()
    y.record_stream(side)  # freed, it waits for an event recorded on `side`
    del y
    snapshot = memory._snapshot()
    (segment,) = [s for s in snapshot["segments"] if any(b["address"] == address for b in s["blocks"])]
    (block,) = [b for b in segment["blocks"] if b["address"] == address]
    assert block["state"] == "active_pending_free"
    assert block["frames"][0]["name"] == "_make_tensor"  # still the allocating stack
    assert segment["active_size"] - segment["allocated_size"] == 1024

    def block_actions(snapshot: Snapshot) -> list[str]:
        return [
            e["action"] for e in _trace(snapshot) if e["action"] in BLOCK_ACTIONS and e["addr"] == address
        ]

    assert block_actions(snapshot) == ["alloc", "free_requested"]
    _make_tensor(1)  # the cache finds the event complete at its next allocation
    assert block_actions(memory._snapshot())[:3] == ["alloc", "free_requested", "free_completed"]
