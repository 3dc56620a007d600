"""Pinned host memory for ember: the hooks' host allocator, is_pinned, and asynchronous copies from it
(the cache itself: test_ember_host_cache.py)."""

from __future__ import annotations

import pytest
import torch
import torch_ember


def test_pin_memory_and_is_pinned() -> None:
    plain = torch.arange(16.0)
    assert not plain.is_pinned()
    pinned = plain.pin_memory()
    assert pinned.is_pinned() and pinned.device.type == "cpu"
    assert torch.equal(pinned, plain)
    assert pinned[3:].is_pinned()  # a pointer inside a pinned block
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()  # already pinned: no copy


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.empty(8, pin_memory=True),
        lambda: torch.zeros(8, pin_memory=True),
        lambda: torch.ones(2, 4, pin_memory=True),
        lambda: torch.empty_strided((4, 2), (1, 4), pin_memory=True),
        lambda: torch.tensor([1.0, 2.0], pin_memory=True),
    ],
)
def test_cpu_factories_with_pin_memory_true(make) -> None:  # noqa: ANN001
    tensor = make()
    assert tensor.device.type == "cpu"
    assert tensor.is_pinned()


def test_non_blocking_copy_from_pinned_memory_returns_before_the_device_is_done() -> None:
    n = 1 << 16
    host = torch.arange(n, dtype=torch.float32).pin_memory()
    torch.ember._sleep(100_000)  # the current stream is busy for 100 ms
    device = host.to("ember", non_blocking=True)
    assert not torch.ember.current_stream().query()  # the copy is queued, not done
    torch.ember.synchronize()
    assert torch.equal(device.cpu(), host)


def test_a_pinned_block_outlives_the_copy_queued_on_it() -> None:
    n = 1 << 16
    host = torch.full((n,), 5.0).pin_memory()
    torch.ember._sleep(50_000)
    device = host.to("ember", non_blocking=True)
    del host  # the block is cached, not reused, until the queued copy has run
    torch.ember.synchronize()
    assert device.sum().item() == 5.0 * n


def test_a_dataloader_pins_its_batches() -> None:
    data = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = torch.utils.data.DataLoader(data, batch_size=4, pin_memory=True)
    assert all(batch.is_pinned() for (batch,) in loader)


def test_the_host_allocator_registered_for_privateuse1_serves_pin_memory() -> None:
    """at::getHostAllocator(PrivateUse1) is ember's: its stats count the blocks pin_memory() maps,
    caches when they are freed, and unmaps when the cache is emptied."""
    stats = torch_ember._C._host_allocator_stats
    torch.ember.empty_host_cache()  # no cached 4 KiB block to serve the allocation below
    before = stats()
    pinned = torch.ones(1024).pin_memory()
    during = stats()
    assert during["num_host_alloc"] == before["num_host_alloc"] + 1
    assert during["active_bytes.current"] == before["active_bytes.current"] + 4096
    assert during["active_requests.current"] == before["active_requests.current"] + 1
    del pinned
    cached = stats()
    assert cached["num_host_free"] == before["num_host_free"]  # kept for reuse
    assert cached["active_bytes.current"] == before["active_bytes.current"]
    torch.ones(1, device="ember")  # torch.accelerator skips a device not yet initialized
    torch.accelerator.empty_host_cache()
    assert stats()["num_host_free"] == before["num_host_free"] + 1
