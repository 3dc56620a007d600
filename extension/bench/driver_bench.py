"""The driver's costs, measured: `python extension/bench/driver_bench.py`.

Builds driver_bench.cpp with the driver's sources into a temporary directory and runs it:
the old design's mprotect pair on a populated 4 MiB region against the launch cost now,
a 1M-float add on the host and as an ember kernel, and 64 MiB copies against a host memcpy.
Then driver_stream_bench.cpp: launch overhead on the default stream and on a created one,
event record + synchronize (on an idle stream, and through a stream's worker thread), the cost
of queueing, and the event timing of a 1 ms sleep.
Then, for the issue's reference point, PyTorch's own CPU add of 1M float32 elements.
Numbers are medians on this machine, printed, never asserted.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DRIVER = HERE.parent / "csrc" / "driver"


def run_driver_bench(bench: str = "driver_bench") -> str:
    """Builds HERE/<bench>.cpp with the driver's sources (one .cpp per area) and returns what it prints."""
    with tempfile.TemporaryDirectory() as tmp:
        program = Path(tmp) / bench
        sources = [HERE / f"{bench}.cpp", *sorted(DRIVER.glob("*.cpp"))]
        subprocess.run(
            ["c++", "-std=c++17", "-O3", "-pthread", f"-I{DRIVER}", *map(str, sources), "-o", str(program)],
            check=True,
        )
        return subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout


def torch_cpu_add_us(elements: int = 1 << 20, repeats: int = 200) -> float | None:
    """Median time of torch.add(a, b, out=c) on the CPU, in microseconds (None without torch).

    One intra-op thread: on a shared 2-core machine a second OpenMP thread that has to wait
    for a core turns a 0.1 ms add into milliseconds now and then."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    a, b = torch.rand(elements), torch.rand(elements)
    c = torch.empty(elements)
    for _ in range(20):
        torch.add(a, b, out=c)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.add(a, b, out=c)
        times.append((time.perf_counter() - start) * 1e6)
    return statistics.median(times)


def main() -> None:
    report = run_driver_bench()
    print(report, end="")
    add = torch_cpu_add_us()
    if add is not None:
        print(f"torch.add of 1M float32, CPU, 1 thread     {add:8.1f} us")
        pair = next(line for line in report.splitlines() if line.startswith("old design: mprotect pair"))
        pair_us = float(pair.split()[-2])
        print(f"one mprotect pair costs {pair_us / add:.1f}x a 1-thread torch.add of 1M float32")
    print("streams and sync events:")
    print(run_driver_bench("driver_stream_bench"), end="")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
