"""ember's caching allocator: what torch.ember and torch.accelerator report, and when memory goes back.

Blocks are rounded up to 512 bytes; requests below 1 MiB share 2 MiB segments, larger ones get segments
rounded to 2 MiB (split only if more than 1 MiB would remain). A freed block stays reserved (cached) until `empty_cache()`.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch_ember  # noqa: F401 (registers the ember device)

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_garbage() -> None:
    # Tensors of earlier tests that sit in reference cycles would be freed at a
    # random point during this test and move the counters under our feet.
    gc.collect()
    torch.ember.synchronize()
    torch.ember.empty_cache()


def test_the_allocator_is_a_device_allocator_for_torch_accelerator() -> None:
    assert torch.ember.get_allocator_backend() == "native"
    x = torch.empty(1000, dtype=torch.float32, device="ember")
    assert torch.accelerator.memory_allocated() == torch.ember.memory_allocated() > 0
    assert torch.accelerator.memory_reserved() == torch.ember.memory_reserved()
    stats = torch.accelerator.memory_stats()
    assert stats["allocation.all.current"] >= 1
    assert torch.ember.memory_stats() == dict(stats)
    del x


def test_sizes_are_rounded_to_512_bytes_and_memory_returns_after_del() -> None:
    start = torch.ember.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="ember")  # 4000 bytes -> 4096
    assert torch.ember.memory_allocated() == start + 4096
    y = torch.ones(10, 10, dtype=torch.float64).to("ember")  # 800 -> 1024
    assert torch.ember.memory_allocated() == start + 4096 + 1024
    assert torch.ember.memory_stats()["requested_bytes.all.current"] >= 4800
    del x
    assert torch.ember.memory_allocated() == start + 1024
    del y
    assert torch.ember.memory_allocated() == start


def test_freed_memory_stays_reserved_until_empty_cache() -> None:
    reserved = torch.ember.memory_reserved()
    driver_before = torch.ember.driver_memory_stats()
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="ember")  # large: its own 4 MiB segment
    assert torch.ember.memory_reserved() == reserved + 4 * MiB
    del x
    assert torch.ember.memory_reserved() == reserved + 4 * MiB  # cached, not returned
    assert torch.ember.driver_memory_stats().live_allocations == driver_before.live_allocations + 1
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() == reserved
    assert torch.ember.driver_memory_stats().live_allocations == driver_before.live_allocations


def test_a_cached_block_is_reused_without_a_driver_call_and_split() -> None:
    x = torch.empty(MiB // 2, dtype=torch.uint8, device="ember")
    address = x.data_ptr()
    del x
    calls = torch.ember.driver_memory_stats().total_allocations
    y = torch.empty(MiB // 2, dtype=torch.uint8, device="ember")
    assert y.data_ptr() == address  # the same block, from the cache
    # Small requests share a 2 MiB segment: a 1 KiB tensor takes the rest of y's segment.
    z = torch.empty(1024, dtype=torch.uint8, device="ember")
    assert address < z.data_ptr() < address + 2 * MiB
    assert torch.ember.driver_memory_stats().total_allocations == calls
    # Interior pointers of a segment work everywhere the driver takes device memory.
    z.fill_(7)
    assert z.cpu().sum().item() == 7 * 1024
    assert torch.equal(z[100:].to("ember:1").cpu(), torch.full((924,), 7, dtype=torch.uint8))
    del y, z


def test_memory_is_counted_per_device() -> None:
    start0, start1 = torch.ember.memory_allocated(0), torch.ember.memory_allocated(1)
    x = torch.empty(256, dtype=torch.uint8, device="ember:1")
    assert torch.ember.memory_allocated(0) == start0
    assert torch.ember.memory_allocated(1) == start1 + 512
    assert torch.ember.memory_allocated("ember:1") == start1 + 512
    with torch.ember.device(1):
        assert torch.ember.memory_allocated() == start1 + 512  # default: the current device
    del x
    assert torch.ember.memory_allocated(1) == start1


def test_peak_and_reset() -> None:
    torch.ember.reset_peak_memory_stats()
    start = torch.ember.memory_allocated()
    assert torch.ember.max_memory_allocated() == start
    x = torch.empty(MiB // 4, dtype=torch.uint8, device="ember")
    y = torch.empty(2 * MiB, dtype=torch.uint8, device="ember")
    del x, y
    z = torch.empty(MiB // 2, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_allocated() == start + MiB // 2
    assert torch.ember.max_memory_allocated() == start + MiB // 4 + 2 * MiB
    assert torch.ember.max_memory_reserved() >= torch.ember.memory_reserved()
    torch.accelerator.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == start + MiB // 2
    del z


def test_accumulated_stats_count_and_reset() -> None:
    torch.ember.reset_accumulated_memory_stats()
    tensors = [torch.empty(16, device="ember") for _ in range(3)]
    del tensors
    stats = torch.ember.memory_stats()
    assert stats["allocation.all.allocated"] == 3
    assert stats["allocation.all.freed"] == 3
    torch.ember.reset_accumulated_memory_stats()
    assert torch.ember.memory_stats()["allocation.all.allocated"] == 0


def test_mem_get_info_reports_free_and_the_capacity() -> None:
    free, total = torch.ember.mem_get_info()
    assert total == 4 << 30  # the driver's default capacity (EMBER_DEVICE_MEMORY_BYTES)
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="ember")
    assert torch.ember.mem_get_info()[0] == free - 8 * MiB
    assert torch.accelerator.get_memory_info() == torch.ember.mem_get_info()
    del x


def test_memory_summary_is_a_table_of_the_stats() -> None:
    x = torch.empty(MiB, dtype=torch.uint8, device="ember")
    summary = torch.ember.memory_summary()
    assert "ember memory summary, device 0" in summary
    assert "Allocated memory" in summary and "Reserved memory" in summary
    assert "from large pool" in summary
    assert "from large pool" not in torch.ember.memory_summary(abbreviated=True)
    del x


def test_fallback_ops_do_not_leak() -> None:
    a = torch.randn(32, 32).to("ember")
    b = torch.randn(32, 32).to("ember")
    start = torch.ember.memory_allocated()
    for _ in range(3):
        c = (a + b) @ a * b
        s = c.sum()
        del c, s
    assert torch.ember.memory_allocated() == start


@pytest.mark.parametrize("device", [2, -1, "ember:9"])
def test_memory_functions_reject_bad_devices(device: int | str) -> None:
    with pytest.raises(
        RuntimeError, match=r"ember driver error: invalid device ordinal: device index -?\d+ is out of range"
    ):
        torch.ember.memory_allocated(device)
    with pytest.raises(
        RuntimeError, match=r"ember driver error: invalid device ordinal: device index -?\d+ is out of range"
    ):
        torch.ember.reset_peak_memory_stats(device)


def test_record_stream_keeps_a_block_from_another_stream_until_its_work_is_done() -> None:
    n = 1 << 16
    side = torch.ember.Stream()
    source = torch.full((n,), 3.0, device="ember")
    copy = torch.empty(n, device="ember")
    with torch.ember.stream(side):
        torch.ember._sleep(50_000)
        copy.copy_(source, non_blocking=True)  # reads `source` on `side`, later
    source.record_stream(side)
    address = source.data_ptr()
    del source
    reused = torch.full((n,), -1.0, device="ember")  # the default stream's next block of that size
    assert reused.data_ptr() != address  # held back: `side` has not reached the free yet
    side.synchronize()
    assert torch.equal(copy.cpu(), torch.full((n,), 3.0))
    after = torch.empty(n, device="ember")  # `side` is done: the block is free again
    assert after.data_ptr() == address
    del copy, reused, after


def test_without_record_stream_the_block_is_reused_at_once() -> None:
    # The hazard record_stream exists for (the same as CUDA's): the default stream reuses the block
    # while `side` still has a copy queued that reads it.
    n = 1 << 16
    side = torch.ember.Stream()
    source = torch.full((n,), 3.0, device="ember")
    copy = torch.empty(n, device="ember")
    with torch.ember.stream(side):
        torch.ember._sleep(50_000)
        copy.copy_(source, non_blocking=True)
    address = source.data_ptr()
    del source
    reused = torch.full((n,), -1.0, device="ember")
    assert reused.data_ptr() == address
    side.synchronize()
    assert torch.equal(copy.cpu(), torch.full((n,), -1.0))  # the copy read the new tensor's data
    del copy, reused


def test_blocks_are_cached_per_stream() -> None:
    side = torch.ember.Stream()
    with torch.ember.stream(side):
        x = torch.empty(4096, device="ember")
    address = x.data_ptr()
    del x
    y = torch.empty(4096, device="ember")  # the default stream does not get `side`'s block
    assert y.data_ptr() != address
    with torch.ember.stream(side):
        z = torch.empty(4096, device="ember")
    assert z.data_ptr() == address
    del y, z


def test_empty_cache_waits_for_record_stream_events() -> None:
    side = torch.ember.Stream()
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="ember")
    with torch.ember.stream(side):
        torch.ember._sleep(30_000)
    x.record_stream(side)
    reserved = torch.ember.memory_reserved()
    del x
    torch.ember.empty_cache()  # waits for `side`, then returns the segment
    assert torch.ember.memory_reserved() == reserved - 4 * MiB


_OOM_CHILD = textwrap.dedent(
    """
    import torch, torch_ember
    MiB = 1 << 20
    assert torch.ember.mem_get_info()[1] == 64 * MiB
    kept = torch.empty(40 * MiB, dtype=torch.uint8, device="ember")
    cached = torch.empty(8 * MiB, dtype=torch.uint8, device="ember")
    del cached  # reserved, not allocated: the allocator frees it and retries before it gives up
    try:
        torch.empty(30 * MiB, dtype=torch.uint8, device="ember")
    except torch.OutOfMemoryError as error:
        print("ERROR", error)
    stats = torch.ember.memory_stats()
    print("OOMS", stats["num_ooms"], "RETRIES", stats["num_alloc_retries"])
    print("RESERVED", torch.ember.memory_reserved() // MiB)
    del kept
    again = torch.empty(60 * MiB, dtype=torch.uint8, device="ember")  # fits after the frees
    again[-4:].fill_(1)
    print("AFTER", again[-4:].cpu().tolist() == [1, 1, 1, 1])
    """
)


def test_out_of_memory_frees_the_cache_retries_then_raises_and_recovers() -> None:
    env = {**os.environ, "EMBER_DEVICE_MEMORY_BYTES": str(64 * MiB)}
    result = subprocess.run(
        [sys.executable, "-c", _OOM_CHILD], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "ERROR ember out of memory. Tried to allocate 30.00 MiB. ember device 0 (ember:0) has a total "
        "capacity of 64.00 MiB of which 24.00 MiB is free. Of the allocated memory 40.00 MiB is allocated "
        "by PyTorch, and 0 bytes is reserved by PyTorch but unallocated." in out
    ), out
    assert "EMBER_DEVICE_MEMORY_BYTES" in out
    assert "OOMS 1 RETRIES 1" in out
    assert "RESERVED 40" in out  # the cached 8 MiB went back to the driver
    assert "AFTER True" in out
