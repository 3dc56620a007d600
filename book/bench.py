"""Compile-time benchmark: `python -m book.bench`.

Prints, for every chapter that has C++, the seconds a reader waits in each of
its build cells (each ``book.build()`` cell that compiles parts of the chapter;
a chapter with one build cell has one row): cold (the cell's sources never
built on this machine, after the one-time warm-up; the earlier chapters' units
were compiled by their own cold builds, and the chapter's earlier build cells
by theirs, as when a reader goes in order) and warm (unchanged sources, a
fresh kernel), and the cold build's ratio to a plain `load_inline` of a
one-function extension with the default headers, measured in the same run:
in seconds waited, and estimated from CPU seconds ("CPU est."), the wait on
idle cores: the build's CPU seconds, its compilers' runs counted as the
builder deals them to its workers (two at a time on two cores), against the
baseline's CPU seconds. A busy machine (the cores shared) stretches the wait
but hardly the CPU seconds, so the estimate is the figure to compare from
run to run there. A
chapter's figure is its slowest build cell. The last line times the last
chapter's last build opened first, with no unit compiled before. Every
measurement runs in a fresh Python process and times only the build call (not
`import torch`).

A cold build includes the load check (`book.builds.preload`: the new library is
loaded in a throwaway process first, because C++ that throws while it loads
would kill the reader's kernel). Its cost is reported per build and as a
fraction of the cold build; a warm build reuses the saved verdict and must
start no check at all. The summary also times the check with a full
`import torch` in the child, the alternative it avoids.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

from book.builds import preload, toolchain
from book.parts.regions import notebook_stem
from book.run.chapter import Chapter, chapters

PLAIN_BASELINE = textwrap.dedent(
    """
    import json, resource, sys, time, tempfile
    from torch.utils.cpp_extension import load_inline
    def cpu():  # this process's CPU seconds and its finished children's (the compiler, the linker)
        return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                   for field in ("ru_utime", "ru_stime"))
    started, started_cpu = time.perf_counter(), cpu()
    load_inline("plain_baseline", cpp_sources=["torch::Tensor twice(torch::Tensor x) { return x * 2; }"],
                functions=["twice"], build_directory=tempfile.mkdtemp())
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": cpu() - started_cpu}))
    """
)

CHAPTER_BUILD = textwrap.dedent(
    """
    import json, os, resource, subprocess, sys, time, types
    from pathlib import Path
    from book.builds import builder, preload, stable, toolchain, units
    def cpu():  # this process's CPU seconds and its finished children's (compilers, linker, load check)
        return sum(getattr(resource.getrusage(who), field) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                   for field in ("ru_utime", "ru_stime"))
    from book.parts.regions import CppPart
    driver = toolchain.driver_library(); toolchain.prelude_dir(); stable.library()  # warm-up, timed separately
    parts = [CppPart(*p) for p in json.loads(open(sys.argv[1]).read())]
    checks = []  # seconds of each load check (book.builds.preload) the build ran
    run_child = preload.run_child
    def timed_child(*args, **kwargs):
        result = run_child(*args, **kwargs)
        checks.append(result.seconds)
        return result
    preload.run_child = timed_child
    compiler_cpu = {}  # each compiler run's own CPU seconds, by its object's folder (the unit's key)
    def compiler_run(command, **kwargs):  # units' subprocess.run, with os.wait4's usage of the child
        with subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) as child:
            stderr = child.stderr.read()
            _, status, usage = os.wait4(child.pid, 0)
            child.returncode = os.waitstatus_to_exitcode(status)
        compiler_cpu[Path(command[-1]).parent.name] = usage.ru_utime + usage.ru_stime
        return subprocess.CompletedProcess(command, child.returncode, "", stderr)
    units.subprocess = types.SimpleNamespace(run=compiler_run)
    queued = sorted((u for u in units.split(parts) if not u.object.exists()), key=lambda u: -u.weight)
    started, started_cpu = time.perf_counter(), cpu()
    build = builder.build(parts=parts, chapter=sys.argv[2])
    used_cpu = cpu() - started_cpu
    # The wait on idle cores, from CPU seconds: the compilers' runs dealt, in the builder's order (the
    # heaviest first), to its workers as each one frees, plus everything else the build spent.
    workers = [0.0] * max(1, min(len(queued), os.cpu_count() or 1))
    for unit in queued:
        workers[workers.index(min(workers))] += compiler_cpu.get(unit.key, 0.0)
    idle = used_cpu - sum(compiler_cpu.values()) + max(workers)
    own_units = [unit for unit in build.linked if unit.chapter == sys.argv[2]]
    print(json.dumps({"seconds": time.perf_counter() - started, "cpu": used_cpu, "idle": idle,
                      "compiled": build.compiled,
                      "units": len(own_units), "unit_objects": [str(unit.object) for unit in build.linked],
                      "checks": checks, "library": str(build.library), "driver": str(driver)}))
    """
)

WARM_UP = textwrap.dedent(
    """
    import json, time
    from book.builds import stable, toolchain
    started = time.perf_counter()
    toolchain.driver_library(); toolchain.prelude_dir(); stable.library()
    from book.builds import builder, units
    units.compile_objects([builder.epilogue_unit()], "the builds' epilogue")  # linked into every build
    print(json.dumps({"seconds": time.perf_counter() - started}))
    """
)


def _run(code: str, env: dict[str, str], *args: str) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"benchmark step failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def _parts_file(cache: Path, parts: list) -> str:
    """A file holding `parts` as JSON: a late chapter's parts are too long for a command line."""
    path = cache / "parts.json"
    path.write_text(json.dumps(parts))
    return str(path)


def _chapter_named(name: str) -> Chapter:
    """A chapter by its slug, its notebook's stem or its label (the stem's ``NN`` prefix)."""
    name = name.removesuffix(".ipynb").rsplit("/", 1)[-1]
    for chapter in chapters():
        if name in (chapter.slug, chapter.notebook, chapter.label):
            return chapter
    known = ", ".join(chapter.slug for chapter in chapters())
    raise LookupError(f"there is no chapter {name!r} (chapters: {known})")


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m book.bench", description=__doc__.splitlines()[0])
    parser.add_argument(
        "chapters",
        nargs="*",
        help="time only these chapters, by slug ('contracts'), notebook ('18_contracts') or label ('18'); "
        "earlier ones are built untimed",
    )
    names = parser.parse_args(argv).chapters
    try:
        selected = {_chapter_named(name).slug for name in names}
    except LookupError as error:
        parser.error(str(error))

    cache = Path(tempfile.mkdtemp(prefix="ember-bench-"))  # an empty build cache, removed at the end
    try:
        return _measure(selected, cache)
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _measure(selected: set[str], cache: Path) -> int:
    env = dict(os.environ, EMBER_BOOK_CACHE=str(cache), EMBER_BOOK_BATCH="1")
    plain = _run(PLAIN_BASELINE, env)
    baseline, baseline_cpu = plain["seconds"], plain["cpu"]
    warm_up = _run(WARM_UP, env)["seconds"]
    print(
        f"plain load_inline baseline (one function, default headers): {baseline:.1f} s "
        f"({baseline_cpu:.1f} s of CPU)"
    )
    print(f"unit compiler: {toolchain.unit_compiler()} {' '.join(toolchain.unit_flags()[-3:])}")
    print(f"one-time warm-up (precompiled prelude, driver, stable library, build epilogue): {warm_up:.1f} s")
    print()
    print(
        f"{'chapter, build':<21} {'parts':>5} {'units':>5} {'cold s':>7} {'check s':>8} {'check/cold':>10} "
        f"{'warm s':>7} {'cold/baseline':>14} {'CPU est.':>9}"
    )
    worst = worst_cpu = 0.0
    check_seconds: list[float] = []
    check_fractions: list[float] = []
    last: dict = {}
    last_parts: list = []
    last_slug = ""
    last_selected = max((Chapter.of(slug).index for slug in selected), default=None)
    for chapter in chapters():
        if not chapter.parts() or (last_selected is not None and chapter.index > last_selected):
            continue
        if selected and chapter.slug not in selected:
            parts = [(p.chapter, p.name, p.source) for p in chapter.parts_through()]
            _run(
                CHAPTER_BUILD, env, _parts_file(cache, parts), chapter.slug
            )  # its units, for the next chapter
            continue
        builds = chapter.build_cells()
        slowest = slowest_cpu = 0.0
        for number, build_parts in enumerate(builds, 1):
            parts = [(p.chapter, p.name, p.source) for p in build_parts]
            label = chapter.notebook if len(builds) == 1 else f"{chapter.notebook} #{number}"
            cold = _run(CHAPTER_BUILD, env, _parts_file(cache, parts), chapter.slug)
            warm = _run(CHAPTER_BUILD, env, _parts_file(cache, parts), chapter.slug)
            if not cold["compiled"] or warm["compiled"]:
                raise RuntimeError(f"{label}: expected a compile then a cache hit")
            if len(cold["checks"]) != 1 or warm["checks"]:
                raise RuntimeError(f"{label}: expected one load check when cold, none when warm")
            check = cold["checks"][0]
            check_seconds.append(check)
            check_fractions.append(check / cold["seconds"])
            ratio = cold["seconds"] / baseline
            cpu_ratio = cold["idle"] / baseline_cpu  # from CPU seconds: a busy machine changes it less
            slowest, slowest_cpu = max(slowest, ratio), max(slowest_cpu, cpu_ratio)
            print(
                f"{label:<21} {len(parts):>5} {cold['units']:>5} {cold['seconds']:>7.2f} {check:>8.2f} "
                f"{check / cold['seconds']:>10.0%} {warm['seconds']:>7.2f} {ratio:>14.2f} {cpu_ratio:>9.2f}"
            )
            last, last_parts, last_slug = cold, parts, chapter.slug
        if len(builds) > 1:
            print(f"{chapter.notebook + ', slowest build':<45} {slowest:>45.2f} {slowest_cpu:>9.2f}")
        worst, worst_cpu = max(worst, slowest), max(worst_cpu, slowest_cpu)
    if last:
        # A reader who opens the last chapter first: every earlier chapter's units compile too (once).
        for path in last["unit_objects"]:
            Path(path).unlink(missing_ok=True)
        shutil.rmtree(Path(last["library"]).parent)
        first = _run(CHAPTER_BUILD, env, _parts_file(cache, last_parts), last_slug)
        print(
            f"{notebook_stem(last_slug)} with no unit compiled before (opened first): {first['seconds']:.2f} s "
            f"({first['seconds'] / baseline:.2f} of the baseline), once per machine"
        )
    print()
    print(
        f"worst cold/baseline ratio of a build cell: {worst:.2f} (target <= 0.25; estimated from CPU seconds, "
        f"which a busy machine changes less: {worst_cpu:.2f}); warm target < 1 s"
    )
    if check_seconds:
        full = preload.run_child(Path(last["library"]), [Path(last["driver"])], import_torch=True)
        print(
            f"load check (book.builds.preload): {sum(check_seconds) / len(check_seconds):.2f} s per cold build, "
            f"{sum(check_fractions) / len(check_fractions):.0%} of it on average; warm builds reuse the "
            f"saved verdict (0 s). With a full `import torch` in the child it would take {full.seconds:.2f} s."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
