"""Compile-time benchmark: `python -m book.bench`.

Prints, for every chapter that has C++, the seconds a reader waits in the
build cell: cold (sources never built on this machine, after the one-time
warm-up) and warm (unchanged sources, a fresh kernel), and the cold build's
ratio to a plain `load_inline` of a one-function extension with the default
headers, measured in the same run. Every measurement runs in a fresh Python
process and times only the build call (not `import torch`).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from book.cells import chapter_paths, parts_in_notebook

PLAIN_BASELINE = textwrap.dedent(
    """
    import json, sys, time, tempfile
    from torch.utils.cpp_extension import load_inline
    started = time.perf_counter()
    load_inline("plain_baseline", cpp_sources=["torch::Tensor twice(torch::Tensor x) { return x * 2; }"],
                functions=["twice"], build_directory=tempfile.mkdtemp())
    print(json.dumps({"seconds": time.perf_counter() - started}))
    """
)

CHAPTER_BUILD = textwrap.dedent(
    """
    import json, sys, time
    from book import builder, toolchain
    from book.cells import CppPart
    toolchain.driver_library(); toolchain.prelude_dir()  # warm-up, timed separately
    parts = [CppPart(*p) for p in json.loads(sys.argv[1])]
    started = time.perf_counter()
    build = builder.build(parts, chapter=sys.argv[2])
    print(json.dumps({"seconds": time.perf_counter() - started, "compiled": build.compiled}))
    """
)

WARM_UP = textwrap.dedent(
    """
    import json, time
    from book import toolchain
    started = time.perf_counter()
    toolchain.driver_library(); toolchain.prelude_dir()
    print(json.dumps({"seconds": time.perf_counter() - started}))
    """
)


def _run(code: str, env: dict[str, str], *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"benchmark step failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main() -> int:
    import os

    cache = Path(tempfile.mkdtemp(prefix="ember-bench-"))
    env = dict(os.environ, EMBER_BOOK_CACHE=str(cache), EMBER_BOOK_BATCH="1")
    baseline = _run(PLAIN_BASELINE, env)["seconds"]
    warm_up = _run(WARM_UP, env)["seconds"]
    print(f"plain load_inline baseline (one function, default headers): {baseline:.1f} s")
    print(f"one-time warm-up (precompiled prelude + driver library):    {warm_up:.1f} s")
    print()
    print(f"{'chapter':<18} {'parts':>5} {'cold s':>7} {'warm s':>7} {'cold/baseline':>14}")
    worst = 0.0
    parts: list[tuple[str, str, str]] = []
    for path in chapter_paths():
        own = [(p.chapter, p.name, p.source) for p in parts_in_notebook(path)]
        if not own:
            continue
        parts += own
        cold = _run(CHAPTER_BUILD, env, json.dumps(parts), path.stem)
        warm = _run(CHAPTER_BUILD, env, json.dumps(parts), path.stem)
        if not cold["compiled"] or warm["compiled"]:
            raise RuntimeError(f"{path.stem}: expected a compile then a cache hit")
        ratio = cold["seconds"] / baseline
        worst = max(worst, ratio)
        print(
            f"{path.stem:<18} {len(parts):>5} {cold['seconds']:>7.2f} {warm['seconds']:>7.2f} {ratio:>14.2f}"
        )
    print()
    print(f"worst cold/baseline ratio: {worst:.2f} (target <= 0.50); warm target < 1 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
