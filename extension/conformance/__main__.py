"""The sweep's command line: `python extension/conformance [--json PATH] [--write-expected PATH]`."""

from __future__ import annotations

import sys
from pathlib import Path

if not __package__:
    # Run as `python extension/conformance` (or its __main__.py, as the workers are): Python put this
    # folder on sys.path, where its modules would be top-level names. Import them as the package
    # `conformance` instead, with extension/ appended (after site-packages, so that `import torch_ember`
    # finds the installed package, not the sources beside this folder).
    _here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _here]
    sys.path.append(str(_here.parent))

import argparse  # noqa: E402

from conformance import report, run, strides, strides_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python extension/conformance",
        description="ember against the CPU over PyTorch's OpInfo database",
    )
    parser.add_argument("--json", type=Path, help="write the summary here")
    parser.add_argument("--samples", type=int, default=None, help="samples per (op, dtype)")
    parser.add_argument("--chunks", type=int, default=None)
    parser.add_argument("--parallel", type=int, default=run.PARALLEL)
    parser.add_argument("--failures", action="store_true", help="print every failure")
    parser.add_argument("--write-expected", type=Path, help="write the expected-failures file for this run")
    parser.add_argument("--strides", action="store_true", help="the stride sweep (strides.py) instead")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--sweep", default="opinfo", help=argparse.SUPPRESS)
    parser.add_argument("--resume-after", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.strides or args.sweep == "strides":
        return strides_main(args)
    samples = args.samples if args.samples is not None else run.default_samples()
    args.chunks = args.chunks if args.chunks is not None else run.CHUNKS
    if args.worker is not None:
        run.worker(args.worker, args.chunks, samples, args.resume_after, args.out)
        return 0
    summary = run.run_sweep(samples, args.chunks, args.parallel)
    data = report.summary_json(summary)
    if args.json:
        report.write_summary(data, args.json)
    report.print_summary(data)
    print(f"wall time: {summary.wall_seconds:.1f} s")  # printed only: the summary holds no timings
    if args.failures:
        for key, detail in sorted(data["failures"].items()):
            print(f"{key}: {detail}")
    if args.write_expected:
        unclassified = report.write_expected(data["failures"], args.write_expected)
        for key in unclassified:
            print(f"not written (no reason matches; decide by hand): {key}: {data['failures'][key]}")
    return 0


def strides_main(args: argparse.Namespace) -> int:
    samples = args.samples if args.samples is not None else strides_report.default_samples()
    args.chunks = args.chunks if args.chunks is not None else strides.CHUNKS
    if args.worker is not None:
        strides.worker(args.worker, args.chunks, samples, args.resume_after, args.out)
        return 0
    summary = run.run_sweep(samples, args.chunks, args.parallel, sweep="strides")
    data = strides_report.summary_json(summary)
    if args.json:
        report.write_summary(data, args.json)
    strides_report.print_summary(data)
    print(f"wall time: {summary.wall_seconds:.1f} s")  # printed only: the summary holds no timings
    if args.failures:
        for key, detail in sorted(data["differences"].items()):
            print(f"{key}: {detail}")
    if args.write_expected:
        unclassified = strides_report.write_expected(data["differences"], args.write_expected)
        for key in unclassified:
            print(f"not written (no reason matches; decide by hand): {key}: {data['differences'][key]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
