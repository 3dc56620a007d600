"""`torch.ember`'s memory statistics follow the driver's allocations exactly."""

from __future__ import annotations

import gc

import pytest
import torch
import torch_ember  # noqa: F401 (registers the ember device)

MiB = 1 << 20


@pytest.fixture(autouse=True)
def _no_garbage() -> None:
    # Tensors of earlier tests that sit in reference cycles would be freed at a
    # random point during this test and move the counters under our feet.
    gc.collect()


def test_memory_returns_to_its_start_after_del() -> None:
    start = torch.ember.memory_allocated()
    x = torch.empty(1000, dtype=torch.float32, device="ember")
    assert torch.ember.memory_allocated() == start + 4000
    y = torch.ones(10, 10, dtype=torch.float64).to("ember")
    assert torch.ember.memory_allocated() == start + 4000 + 800
    del x
    assert torch.ember.memory_allocated() == start + 800
    del y
    assert torch.ember.memory_allocated() == start


def test_views_do_not_allocate() -> None:
    x = torch.empty(64, device="ember")
    start = torch.ember.memory_allocated()
    views = [x.view(8, 8), x[3:], x.view(8, 8).t(), x.unsqueeze(1)]
    assert torch.ember.memory_allocated() == start
    del x
    assert torch.ember.memory_allocated() == start  # the views keep the storage alive
    del views
    assert torch.ember.memory_allocated() == start - 256


def test_empty_tensor_allocates_nothing() -> None:
    start = torch.ember.driver_memory_stats()
    x = torch.empty(0, device="ember")
    after = torch.ember.driver_memory_stats()
    assert after.bytes_in_use == start.bytes_in_use
    assert after.live_allocations == start.live_allocations
    del x


def test_memory_is_counted_per_device() -> None:
    start0, start1 = torch.ember.memory_allocated(0), torch.ember.memory_allocated(1)
    x = torch.empty(256, dtype=torch.uint8, device="ember:1")
    assert torch.ember.memory_allocated(0) == start0
    assert torch.ember.memory_allocated(1) == start1 + 256
    assert torch.ember.memory_allocated("ember:1") == start1 + 256
    assert torch.ember.memory_allocated(torch.device("ember", 1)) == start1 + 256
    with torch.ember.device(1):
        assert torch.ember.memory_allocated() == start1 + 256  # default: the current device
    del x
    assert torch.ember.memory_allocated(1) == start1


def test_copy_to_the_other_device_allocates_there() -> None:
    x = torch.empty(100, dtype=torch.float32, device="ember:0")
    start1 = torch.ember.memory_allocated(1)
    y = x.to("ember:1")
    assert torch.ember.memory_allocated(1) == start1 + 400
    del x, y
    assert torch.ember.memory_allocated(1) == start1


def test_peak_and_reset() -> None:
    torch.ember.reset_peak_memory_stats()
    start = torch.ember.memory_allocated()
    assert torch.ember.max_memory_allocated() == start
    x = torch.empty(MiB, dtype=torch.uint8, device="ember")
    y = torch.empty(2 * MiB, dtype=torch.uint8, device="ember")
    del x, y
    z = torch.empty(MiB // 2, dtype=torch.uint8, device="ember")
    assert torch.ember.memory_allocated() == start + MiB // 2
    assert torch.ember.max_memory_allocated() == start + 3 * MiB  # the high-water mark stays
    torch.ember.reset_peak_memory_stats()
    assert torch.ember.max_memory_allocated() == start + MiB // 2  # reset to current usage
    del z
    assert torch.ember.max_memory_allocated() == start + MiB // 2


def test_peak_is_per_device() -> None:
    torch.ember.reset_peak_memory_stats(0)
    torch.ember.reset_peak_memory_stats(1)
    peak0 = torch.ember.max_memory_allocated(0)
    x = torch.empty(MiB, dtype=torch.uint8, device="ember:1")
    del x
    assert torch.ember.max_memory_allocated(0) == peak0
    assert torch.ember.max_memory_allocated(1) >= MiB
    torch.ember.reset_peak_memory_stats("ember:1")
    assert torch.ember.max_memory_allocated(1) == torch.ember.memory_allocated(1)


def test_reserved_equals_allocated_and_empty_cache_is_a_no_op() -> None:
    x = torch.empty(4096, dtype=torch.uint8, device="ember")
    allocated = torch.ember.memory_allocated()
    assert torch.ember.memory_reserved() == allocated
    torch.ember.empty_cache()
    assert torch.ember.memory_allocated() == allocated
    assert torch.ember.memory_reserved() == allocated
    del x


def test_driver_counters_track_allocations_and_frees() -> None:
    before = torch.ember.driver_memory_stats()
    tensors = [torch.empty(16, device="ember") for _ in range(3)]
    during = torch.ember.driver_memory_stats()
    assert during.live_allocations == before.live_allocations + 3
    assert during.total_allocations == before.total_allocations + 3
    del tensors
    after = torch.ember.driver_memory_stats()
    assert after.live_allocations == before.live_allocations
    assert after.total_frees == before.total_frees + 3


def test_fallback_ops_do_not_leak() -> None:
    a = torch.randn(32, 32).to("ember")
    b = torch.randn(32, 32).to("ember")
    start = torch.ember.driver_memory_stats()
    for _ in range(3):
        c = (a + b) @ a * b
        s = c.sum()
        del c, s
    end = torch.ember.driver_memory_stats()
    assert end.bytes_in_use == start.bytes_in_use
    assert end.live_allocations == start.live_allocations


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
