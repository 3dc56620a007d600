"""The operator benchmark's plumbing: the fallback binding and the keys it reports."""

from __future__ import annotations

import torch
import torch_ember
from torch_ember import bench


def test_fallback_add_computes_on_the_cpu_and_returns_an_ember_tensor() -> None:
    a = torch.arange(6.0).reshape(2, 3)
    b = torch.full((3,), 0.5)
    result = torch_ember._C._fallback_add(a.to("ember"), b.to("ember"))
    assert result.device == torch.device("ember", 0)
    torch.testing.assert_close(result.cpu(), a + b, rtol=0, atol=0)


def test_fallback_add_allocates_only_its_result_on_the_device() -> None:
    # The inputs are copied to host tensors; the CPU result is copied into one new ember tensor.
    a, b = torch.ones(4, device="ember"), torch.ones(4, device="ember")
    before = torch_ember.device_module.driver_memory_stats().total_allocations
    torch_ember._C._fallback_add(a, b)
    after = torch_ember.device_module.driver_memory_stats().total_allocations
    assert after - before == 1  # only the result is allocated on the device


def test_measure_reports_every_stable_key() -> None:
    results = bench.measure(repeat=3)
    expected = {"add_1m_vs_cpu", "add_1m_alloc_vs_cpu", "latency_1elem_vs_cpu"}
    expected |= {f"fallback_vs_native_{n}" for n in bench.FALLBACK_SIZES}
    assert expected <= results.keys()
    assert all(value > 0 for value in results.values())
