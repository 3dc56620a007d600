"""Allocator settings through PYTORCH_ALLOC_CONF: max_split_size_mb, garbage_collection_threshold,
expandable_segments, and PyTorch's own errors for a malformed value.

The settings are read once, when the device cache is first used, so each setting runs in a child
process. Every child runs the same scenarios on a 256 MiB device and prints their numbers as JSON;
the tests compare a setting's numbers with the defaults' (CUDA's semantics).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from typing import Any

import pytest

MiB = 1 << 20
CAPACITY = 256 * MiB

SCENARIOS = r"""
import json
import torch
import torch_ember  # noqa: F401

MiB = 1 << 20
mem = torch.ember


def floats(mib: float) -> int:
    return int(mib * MiB) // 4


def stats() -> dict:
    return mem.memory_stats()


out = {"backend": mem.get_allocator_backend(), "max_split_size": stats()["max_split_size"]}

# Growing batch sizes: each request is larger than any block freed before it.
mem.empty_cache()
peak = 0
for step in range(1, 9):
    x = torch.empty(floats(5 * step), device="ember")
    peak = max(peak, mem.memory_allocated())
    del x
free, total = mem.mem_get_info()
out["grow"] = {
    "peak_allocated": peak,
    "reserved": mem.memory_reserved(),
    "segments": stats()["segment.all.current"],
    "driver_bytes": mem.driver_memory_stats().bytes_in_use,
    "driver_used": total - free,
}
mem.empty_cache()
out["grow"]["reserved_after_empty"] = mem.memory_reserved()
out["grow"]["driver_after_empty"] = mem.driver_memory_stats().bytes_in_use

# Values through blocks that span mapped chunks, and a second stream.
a = torch.arange(floats(7), dtype=torch.float32)
x = a.to("ember")
y = x * 3 + 1
z = x.clone()
side = torch.ember.Stream()
with torch.ember.stream(side):
    w = torch.ones(floats(6), device="ember") * 2
torch.ember.synchronize()
out["values"] = {
    "ok": bool(torch.equal(y.cpu(), a * 3 + 1) and torch.equal(z.cpu(), a))
    and bool((w.cpu() == 2).all()),
    "segments": stats()["segment.all.current"],
}
del a, x, y, z, w
mem.empty_cache()

# max_split_size_mb: a freed 40 MiB block, then a 4 MiB and a 30 MiB request.
big = torch.empty(floats(40), device="ember")
del big
small = torch.empty(floats(4), device="ember")
s = stats()
out["split"] = {
    "segments": s["segment.all.current"],
    "reserved": mem.memory_reserved(),
    "oversize_segments": s["oversize_segments.current"],
    "oversize_allocations_peak": s["oversize_allocations.peak"],
}
del small
mid = torch.empty(floats(30), device="ember")
out["split"]["mid_allocated"] = mem.memory_allocated()
del mid
out["split"]["oversize_allocations"] = stats()["oversize_allocations.current"]
mem.empty_cache()
out["split"]["oversize_segments_after_empty"] = stats()["oversize_segments.current"]

# garbage_collection_threshold: five requests of new sizes, each freed.
mem.reset_peak_memory_stats()
frees = stats()["num_device_free"]
for mib in (30, 34, 38, 42, 46):
    x = torch.empty(floats(mib), device="ember")
    del x
out["gc"] = {
    "peak_reserved": stats()["reserved_bytes.all.peak"],
    "device_frees": stats()["num_device_free"] - frees,
}
print(json.dumps(out))
"""


def run_child(env_vars: dict[str, str], code: str = SCENARIOS) -> subprocess.CompletedProcess[str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTORCH_ALLOC_CONF",
            "PYTORCH_CUDA_ALLOC_CONF",
            "EMBER_DEVICE_MEMORY_BYTES",
        )
    }
    env["EMBER_DEVICE_MEMORY_BYTES"] = str(CAPACITY)
    env.update(env_vars)
    return subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


SETTINGS = {
    "default": {},
    # With a split limit, which expandable segments' blocks ignore.
    "expandable": {"PYTORCH_ALLOC_CONF": "expandable_segments:True, max_split_size_mb:20"},
    "split": {"PYTORCH_ALLOC_CONF": "max_split_size_mb:20"},
    # The deprecated variable still works (PyTorch 2.13 prints no warning for it).
    "gc": {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.5"},
}


@cache
def results() -> dict[str, tuple[dict[str, Any], str]]:
    """Each setting's numbers and stderr: the children run side by side, once."""
    with ThreadPoolExecutor(max_workers=len(SETTINGS)) as pool:
        done = dict(zip(SETTINGS, pool.map(run_child, SETTINGS.values()), strict=True))
    out = {}
    for name, child in done.items():
        assert child.returncode == 0, f"{name}: {child.stderr[-3000:]}"
        out[name] = (json.loads(child.stdout.splitlines()[-1]), child.stderr)
    return out


def numbers(name: str) -> dict[str, Any]:
    return results()[name][0]


def test_every_setting_keeps_the_native_allocator_and_correct_values() -> None:
    for name in SETTINGS:
        assert numbers(name)["backend"] == "native", name
        assert numbers(name)["values"]["ok"], name


def test_expandable_segments_stop_fragmentation_from_growing_batches() -> None:
    default, expandable = numbers("default")["grow"], numbers("expandable")["grow"]
    # Without: one cached segment per size (5, 10, ... 40 MiB, each rounded up to 2 MiB).
    assert default["peak_allocated"] == 40 * MiB
    assert default["reserved"] == (6 + 10 + 16 + 20 + 26 + 30 + 36 + 40) * MiB
    assert default["segments"] == 8
    # With: one segment, grown in place to the largest request.
    assert expandable["peak_allocated"] == 40 * MiB
    assert expandable["reserved"] == 40 * MiB and expandable["segments"] == 1
    # The driver has committed exactly the mapped pages; empty_cache unmaps them.
    assert expandable["driver_bytes"] == expandable["driver_used"] == 40 * MiB
    assert expandable["reserved_after_empty"] == 0 and expandable["driver_after_empty"] == 0


def test_expandable_segments_are_one_per_stream() -> None:
    # The default stream's and the side stream's.
    assert numbers("expandable")["values"]["segments"] == 2
    assert numbers("default")["values"]["segments"] > 2  # one per 7 MiB tensor


def test_max_split_size_keeps_large_blocks_whole() -> None:
    default, limited = numbers("default")["split"], numbers("split")["split"]
    assert numbers("default")["max_split_size"] == -1  # unlimited, as CUDA reports it
    assert numbers("split")["max_split_size"] == 20 * MiB
    # Without a limit the cached 40 MiB block is split for 4 MiB; with one, 4 MiB gets a segment.
    assert default["segments"] == 1 and default["reserved"] == 40 * MiB
    assert limited["segments"] == 2 and limited["reserved"] == 44 * MiB
    assert default["oversize_segments"] == 0 and limited["oversize_segments"] == 1
    assert limited["oversize_allocations_peak"] == 1
    # An oversize request takes a cached block less than 20 MiB larger, whole.
    assert default["mid_allocated"] == 30 * MiB
    assert limited["mid_allocated"] == 40 * MiB
    assert limited["oversize_allocations"] == 0
    assert limited["oversize_segments_after_empty"] == 0


def test_blocks_of_expandable_segments_split_whatever_their_size() -> None:
    split = numbers("expandable")["split"]
    assert numbers("expandable")["max_split_size"] == 20 * MiB
    # The freed 40 MiB block serves 4 MiB, then 30 MiB, split both times.
    assert split["segments"] == 1 and split["reserved"] == 40 * MiB
    assert split["mid_allocated"] == 30 * MiB


def test_garbage_collection_threshold_releases_cached_segments_first() -> None:
    default, collected = numbers("default")["gc"], numbers("gc")["gc"]
    assert default["peak_reserved"] == (30 + 34 + 38 + 42 + 46) * MiB
    assert default["device_frees"] == 0
    # Half of the 256 MiB device: the oldest cached segments went back before it was passed.
    assert collected["peak_reserved"] <= CAPACITY // 2
    assert collected["device_frees"] == 2


ALLOCATE = "import torch, torch_ember\ntorch.empty(1, device='ember')\n"
MALFORMED = {
    "max_split_size_mb:abc": "a value is not a number",
    "max_split_size_mb:5": "max_split_size_mb too small, must be >= 20",
    "expandable_segments:maybe": "Expected 'True' or 'False'",
    "expandable_segment:True": "Unrecognized key 'expandable_segment'",
}


@cache
def malformed_children() -> dict[str, subprocess.CompletedProcess[str]]:
    with ThreadPoolExecutor(max_workers=len(MALFORMED)) as pool:
        runs = [pool.submit(run_child, {"PYTORCH_ALLOC_CONF": setting}, ALLOCATE) for setting in MALFORMED]
        return {setting: run.result() for setting, run in zip(MALFORMED, runs, strict=True)}


@pytest.mark.parametrize(("setting", "reason"), MALFORMED.items())
def test_a_malformed_setting_is_pytorchs_error_at_the_first_allocation(setting: str, reason: str) -> None:
    child = malformed_children()[setting]
    assert child.returncode != 0
    last = child.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: ember: cannot use "), child.stderr[-2000:]
    assert f'PYTORCH_ALLOC_CONF="{setting}"' in last and reason in last, last
