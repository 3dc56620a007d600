"""How the benchmarks time and judge (`torch_ember.bench`, `torch_ember.bench_distributed`).

Both sides of a ratio are timed in the same run, interleaved: each round times one call of each
side back to back, and the figure is the median over rounds of the per-round ratio. An ember call
is timed to `torch.accelerator.synchronize()` after it (`synced`), a CPU call bare.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Target:
    """A key's target: `value <= bound` (`at_most`) or `value >= bound`."""

    bound: float
    at_most: bool

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound

    def __str__(self) -> str:
        return f"{'<=' if self.at_most else '>='} {self.bound:g}"


def synchronize() -> None:
    # PyTorch's generic call: the device guard's synchronizeDevice, emDeviceSynchronize from C++.
    # torch.ember.synchronize() makes the same driver call through ctypes, about 1 us slower.
    torch.accelerator.synchronize()


def synced(call: Callable[[], object]) -> Callable[[], None]:
    """`call`, then `torch.accelerator.synchronize()`: how every ember side is timed (its work finished)."""

    def run() -> None:
        call()
        synchronize()

    return run


def interleaved(calls: list[Callable[[], object]], rounds: int, warmup: int = 2) -> list[list[float]]:
    """Seconds of each call in each round, the calls timed in turn within a round. Nothing is added
    to a call: ember calls come wrapped in `synced`, CPU calls bare."""
    for _ in range(warmup):
        for call in calls:
            call()
    times: list[list[float]] = [[] for _ in calls]
    for _ in range(max(1, rounds)):
        for call, samples in zip(calls, times, strict=True):
            start = time.perf_counter()
            call()
            samples.append(time.perf_counter() - start)
    return times


def ratio(numerator: list[float], denominator: list[float]) -> float:
    """The median over rounds of numerator / denominator, each pair timed back to back: load that
    comes and goes during a run cancels within a round (it would skew a ratio of two medians)."""
    return statistics.median(n / d for n, d in zip(numerator, denominator, strict=True))


def median_us(samples: list[float]) -> float:
    return statistics.median(samples) * 1e6
