"""Operator benchmark of the finished backend: ember against the CPU, side by side.

    python -m torch_ember.bench [--json PATH] [--repeat N]

Every figure is a ratio of two medians measured in the same run, interleaved
(one CPU call, one ember call, ...), so machine load affects both sides alike.
Absolute times are printed for context only; the ratios are the result.

Keys (stable, also written by ``--json``):

- ``add_1m_vs_cpu``: ``torch.add(a, b, out=c)`` on 1M float32, ember / CPU.
- ``add_1m_alloc_vs_cpu``: ``a + b`` (allocates its result), ember / CPU.
- ``latency_1elem_vs_cpu``: ``a + b`` on one element, ember / CPU.
- ``fallback_vs_native_<n>``: ``a + b`` through the CPU fallback / native, for
  n float32 elements (the native kernel should win from 4K up).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import torch_ember

FALLBACK_SIZES = [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22]


def _median_pair(
    first: Callable[[], object], second: Callable[[], object], repeat: int
) -> tuple[float, float]:
    """Median seconds of `first` and `second`, interleaved call by call."""
    for _ in range(max(3, repeat // 10)):  # warm up both
        first()
        second()
    times_first: list[float] = []
    times_second: list[float] = []
    for _ in range(repeat):
        start = time.perf_counter()
        first()
        middle = time.perf_counter()
        second()
        torch_ember.device_module.synchronize()
        end = time.perf_counter()
        times_first.append(middle - start)
        times_second.append(end - middle)
    return statistics.median(times_first), statistics.median(times_second)


def _pair(numel: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(numel)
    return torch.rand(numel, generator=generator), torch.rand(numel, generator=generator)


def measure(repeat: int = 200) -> dict[str, float]:
    """Run every benchmark once; return the ratios under their stable keys (plus `_us` context)."""
    results: dict[str, float] = {}
    a, b = _pair(1 << 20)
    ea, eb = a.to("ember"), b.to("ember")
    out, eout = torch.empty_like(a), torch.empty_like(ea)
    cpu, ember = _median_pair(lambda: torch.add(a, b, out=out), lambda: torch.add(ea, eb, out=eout), repeat)
    results["add_1m_vs_cpu"] = ember / cpu
    results["add_1m_cpu_us"] = cpu * 1e6
    cpu, ember = _median_pair(lambda: a + b, lambda: ea + eb, repeat)
    results["add_1m_alloc_vs_cpu"] = ember / cpu

    one, eone = torch.ones(1), torch.ones(1, device="ember")
    cpu, ember = _median_pair(lambda: one + one, lambda: eone + eone, repeat * 5)
    results["latency_1elem_vs_cpu"] = ember / cpu
    results["latency_1elem_cpu_us"] = cpu * 1e6

    fallback_add = torch_ember._C._fallback_add
    for numel in FALLBACK_SIZES:
        x, y = (t.to("ember") for t in _pair(numel))
        native, fallback = _median_pair(lambda x=x, y=y: x + y, lambda x=x, y=y: fallback_add(x, y), repeat)
        results[f"fallback_vs_native_{numel}"] = fallback / native
    return results


def _table(results: dict[str, float]) -> str:
    rows = [
        ("add, 1M float32, out= (ember / CPU)", "add_1m_vs_cpu"),
        ("add, 1M float32, a + b (ember / CPU)", "add_1m_alloc_vs_cpu"),
        ("add, 1 element (ember / CPU)", "latency_1elem_vs_cpu"),
    ]
    rows += [(f"fallback / native add, {n} elements", f"fallback_vs_native_{n}") for n in FALLBACK_SIZES]
    width = max(len(label) for label, _ in rows)
    lines = [f"{label:<{width}}  {results[key]:6.2f}x" for label, key in rows]
    lines.append(
        f"(context: CPU add of 1M float32 {results['add_1m_cpu_us']:.0f} us, "
        f"of 1 element {results['latency_1elem_cpu_us']:.1f} us; {torch.get_num_threads()} threads)"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--repeat", type=int, default=200, help="timed calls per measurement")
    args = parser.parse_args(argv)
    results = measure(args.repeat)
    print(_table(results))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
