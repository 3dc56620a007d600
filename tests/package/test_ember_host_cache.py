"""The caching pinned host allocator: reuse of freed blocks, never while a copy queued on
them is pending, `empty_host_cache`, its statistics under `torch.cuda`'s keys, is_pinned."""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Iterator

import pytest
import torch
import torch_ember  # noqa: F401 (registers torch.ember)

MIB_FLOATS = 1 << 18  # 1 MiB of float32


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    """Each test starts and ends with nothing cached and the device idle."""
    torch.ember.synchronize()
    torch.ember.empty_host_cache()
    yield
    torch.ember.synchronize()
    torch.ember.empty_host_cache()


def stats() -> dict[str, int]:
    return dict(torch.ember.host_memory_stats())


def test_a_freed_block_is_reused_and_the_stats_count_a_hit() -> None:
    first = torch.empty(MIB_FLOATS, pin_memory=True)
    address = first.data_ptr()
    del first
    before = stats()
    assert before["allocations.current"] - before["active_requests.current"] == 1  # cached
    second = torch.empty(MIB_FLOATS, pin_memory=True)
    after = stats()
    assert second.data_ptr() == address
    assert after["num_host_alloc"] == before["num_host_alloc"]  # no new block from the OS
    assert after["active_requests.allocated"] == before["active_requests.allocated"] + 1  # a hit
    assert after["host_alloc_time.count"] == before["host_alloc_time.count"]


def test_sizes_share_a_block_by_power_of_two() -> None:
    first = torch.empty(3000, dtype=torch.uint8, pin_memory=True)  # a 4096-byte block
    address = first.data_ptr()
    del first
    assert torch.empty(4096, dtype=torch.uint8, pin_memory=True).data_ptr() == address
    assert torch.empty(4097, dtype=torch.uint8, pin_memory=True).data_ptr() != address


def test_a_block_is_not_reused_while_a_copy_queued_on_it_is_pending() -> None:
    host = torch.full((MIB_FLOATS,), 3.0, pin_memory=True)
    address = host.data_ptr()
    torch.ember._sleep(300_000)  # the current stream is busy for 300 ms
    device = host.to("ember", non_blocking=True)
    assert not torch.ember.current_stream().query()  # the copy is still queued
    del host
    before = stats()
    other = torch.empty(MIB_FLOATS, pin_memory=True)
    assert other.data_ptr() != address  # the queued copy still reads the freed block
    assert stats()["num_host_alloc"] == before["num_host_alloc"] + 1
    other.fill_(7.0)  # had the block been handed out, this would reach the copy
    torch.ember.empty_host_cache()  # a pending block is not returned to the OS either
    assert stats()["num_host_free"] == before["num_host_free"]
    torch.ember.synchronize()
    assert torch.equal(device.cpu(), torch.full((MIB_FLOATS,), 3.0))
    # The copy has finished: the block is free for the next allocation.
    assert torch.empty(MIB_FLOATS, pin_memory=True).data_ptr() == address


@pytest.mark.parametrize("where", ["side stream", "device 1"])
def test_the_event_is_recorded_on_the_stream_the_copy_used(where: str) -> None:
    # The copy runs on a side stream, or on device 1's stream; the current stream of device 0
    # is idle, so only an event on the copy's own stream keeps the block from reuse.
    host = torch.full((MIB_FLOATS,), 4.0, pin_memory=True)
    address = host.data_ptr()
    index = 1 if where == "device 1" else 0
    with torch.ember.device(index), torch.ember.stream(torch.ember.Stream()):
        torch.ember._sleep(100_000)
        device = host.to(f"ember:{index}", non_blocking=True)
        del host
        assert torch.empty(MIB_FLOATS, pin_memory=True).data_ptr() != address
        torch.ember.current_stream().synchronize()
    assert torch.equal(device.cpu(), torch.full((MIB_FLOATS,), 4.0))
    assert torch.empty(MIB_FLOATS, pin_memory=True).data_ptr() == address


def test_a_copy_into_a_pinned_block_delays_its_reuse_too() -> None:
    source = torch.arange(MIB_FLOATS, dtype=torch.float32)
    device = source.to("ember")
    host = torch.empty(MIB_FLOATS, pin_memory=True)
    address = host.data_ptr()
    torch.ember._sleep(100_000)
    host.copy_(device, non_blocking=True)  # device -> pinned host, queued
    view = host[10:]  # the copy kernel records the use through any pointer in the block
    del host, view
    assert torch.empty(MIB_FLOATS, pin_memory=True).data_ptr() != address
    torch.ember.synchronize()


def test_values_round_trip_through_pinned_blocks() -> None:
    source = torch.randn(4, 1000, generator=torch.Generator().manual_seed(0))
    for _ in range(3):  # the later rounds reuse the cached blocks
        pinned = source.pin_memory()
        device = pinned.to("ember", non_blocking=True)
        back = torch.empty_like(source, pin_memory=True)
        back.copy_(device * 2, non_blocking=True)
        torch.ember.synchronize()
        assert torch.equal(back, source * 2)
        del pinned, back


def test_empty_host_cache_returns_the_cached_blocks_to_the_os() -> None:
    blocks = [torch.empty(MIB_FLOATS, pin_memory=True) for _ in range(3)]
    kept = torch.empty(1024, pin_memory=True)
    del blocks
    before = stats()
    assert before["allocated_bytes.current"] - before["active_bytes.current"] == 3 << 20
    torch.ember.empty_host_cache()
    after = stats()
    assert after["num_host_free"] == before["num_host_free"] + 3
    assert after["allocated_bytes.current"] == after["active_bytes.current"] == before["active_bytes.current"]
    assert after["host_free_time.count"] == before["host_free_time.count"] + 3
    assert kept.is_pinned()  # a live tensor keeps its block


def test_torch_accelerator_empty_host_cache_empties_embers_cache() -> None:
    torch.ones(1, device="ember")  # PyTorch skips the host cache of a device not yet initialized
    torch.empty(MIB_FLOATS, pin_memory=True)  # allocated and freed: cached
    free = stats()["num_host_free"]
    torch.accelerator.empty_host_cache()
    assert stats()["num_host_free"] == free + 1


def test_is_pinned_inside_a_block_and_not_outside() -> None:
    pinned = torch.zeros(3000, dtype=torch.uint8, pin_memory=True)
    assert pinned.is_pinned() and pinned[1:].is_pinned() and pinned[-1:].is_pinned()
    assert not torch.zeros(3000, dtype=torch.uint8).is_pinned()


def test_the_stats_have_torch_cudas_keys() -> None:
    keys = set(stats())
    expected = {
        f"{name}.{field}"
        for name in (
            "allocations",
            "allocated_bytes",
            "active_requests",
            "active_bytes",
        )
        for field in ("current", "peak", "allocated", "freed")
    }
    expected |= {
        f"{name}.{field}"
        for name in ("host_alloc_time", "host_free_time")
        for field in ("total", "max", "min", "count", "avg")
    }
    expected |= {"num_host_alloc", "num_host_free"}
    assert keys == expected
    assert list(torch.ember.host_memory_stats()) == sorted(expected)
    nested = torch.ember.host_memory_stats_as_nested_dict()
    assert nested["allocations"]["current"] == stats()["allocations.current"]


def test_reset_peak_and_accumulated_host_memory_stats() -> None:
    blocks = [torch.empty(MIB_FLOATS, pin_memory=True) for _ in range(2)]
    del blocks
    assert stats()["active_bytes.peak"] >= 2 << 20
    torch.ember.reset_peak_host_memory_stats()
    assert stats()["active_bytes.peak"] == stats()["active_bytes.current"]
    torch.ember.reset_accumulated_host_memory_stats()
    after = stats()
    assert after["active_requests.allocated"] == after["active_requests.freed"] == 0
    assert after["host_alloc_time.count"] == 0


def test_without_torch_embers_library_the_functions_say_what_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The book attaches its own driver library, which has no host allocator entry points.
    from torch_ember.device_module import devices

    class Library:
        pass

    class Driver:
        lib = Library()

    monkeypatch.setattr(devices, "_driver", Driver())
    with pytest.raises(RuntimeError, match="the loaded backend has no emberHostMemoryStats"):
        torch.ember.host_memory_stats()
    with pytest.raises(RuntimeError, match="the loaded backend has no emberEmptyHostCache"):
        torch.ember.empty_host_cache()


def test_an_attached_backend_is_where_entry_points_are_looked_up() -> None:
    # A chapter's build attaches itself (book.build()); the package uses its _C, the
    # library its driver comes from.
    from torch_ember.device_module import backend

    backend.attach_backend(ctypes.CDLL(ctypes.util.find_library("m")))  # no entry points
    try:
        with pytest.raises(RuntimeError, match="the loaded backend has no emberMemorySnapshot"):
            torch.ember.memory._snapshot()
    finally:
        backend.attach_backend(None)
    assert "segments" in torch.ember.memory._snapshot()
