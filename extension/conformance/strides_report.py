"""What the stride sweep (strides.py) reports, and why a difference may be expected.

The summary (`summary_json`, committed as strides_summary.json, no timings) counts the ops, samples,
variants and ATen calls compared and lists every difference ("VARIANT aten.OP.OVERLOAD" -> the first
sample's detail). The expected-differences file (strides_expected.toml) lists each difference under
its reason (`REASONS`, matched against "KEY: detail" as reasons.py does for the OpInfo sweep); the
package's test is strict both ways, as the OpInfo sweep's is.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import strides
from .compare import DEVICE
from .run import Summary

HERE = Path(__file__).resolve().parent
SUMMARY_FILE = HERE / "strides_summary.json"
EXPECTED_FILE = HERE / "strides_expected.toml"


def default_samples() -> int:
    return strides.FULL_SAMPLES if os.environ.get("EMBER_FULL_SWEEP") == "1" else strides.CI_SAMPLES


# reason -> (pattern matched against "KEY: detail", the text the file gives as its `why`).
REASONS: dict[str, tuple[str, str]] = {
    "cpu_differs_too": (
        re.escape(strides.CPU_TOO),
        "PyTorch's own CPU kernel returns the same metadata for these inputs, and FakeTensor predicts "
        "other metadata for the CPU too: the prediction is PyTorch's gap, not ember's. ember computes "
        "these with the CPU's kernel (the host kernel or the CPU fallback), so it returns what the "
        "CPU returns; the fix belongs in PyTorch's meta kernel, and would then reach the CPU and ember alike.",
    ),
    "cuda_auxiliary_outputs": (
        r"^\w+ aten\._embedding_bag",
        "PyTorch's meta kernel gives every device but the CPU the auxiliary outputs of CUDA's kernel "
        "(offset2bag with one entry per index, bag_size with one per offset). ember runs embedding_bag "
        "with the CPU's kernel (the CPU fallback), and its backward, also the CPU's, reads them in the "
        "CPU's form, so they keep it; the bags themselves (output 0) agree. Matching would take an ember "
        "kernel of its own, forward and backward.",
    ),
}


def classify(key: str, detail: str) -> str | None:
    for reason, (pattern, _why) in REASONS.items():
        if re.search(pattern, f"{key}: {detail}"):
            return reason
    return None


def summary_json(summary: Summary) -> dict[str, Any]:
    """The counts of a stride sweep: what strides_summary.json holds."""
    ran = [r for r in summary.results if r.status == "pass"]
    opinfo = [r for r in ran if r.kind != strides.MODEL_VARIANT]
    differences: dict[str, str] = {}
    for result in sorted(ran, key=lambda r: (r.op, r.kind)):  # the same detail however chunked
        for key, detail in result.differences.items():
            differences.setdefault(key, f"{result.op}: {detail}")
    return {
        "device": DEVICE,
        "dtype": strides.DTYPE,
        "samples_per_op": summary.samples,
        "variants": list(strides.VARIANTS),
        "ops": len({r.op for r in opinfo}),
        "samples": sum(r.samples for r in opinfo),
        "op_variants": len(opinfo),
        "by_variant": {v: sum(r.samples for r in opinfo if r.kind == v) for v in strides.VARIANTS},
        "model_cases": sorted(r.op for r in ran if r.kind == strides.MODEL_VARIANT),
        "calls_compared": sum(r.compared for r in ran),
        "calls_unpredicted": sum(r.unpredicted for r in ran),
        "crashes": sum(r.status == "crash" for r in summary.results),
        "failures": {r.key: r.detail for r in summary.results if r.status in ("fail", "crash")},
        "differences": dict(sorted(differences.items())),
    }


def print_summary(data: dict[str, Any], out: Callable[[str], None] = print) -> None:
    out(
        f"{data['ops']} ops, {data['samples']} samples in {data['op_variants']} (op, variant) pairs "
        f"({', '.join(f'{v} {n}' for v, n in data['by_variant'].items())}), "
        f"{len(data['model_cases'])} model cases"
    )
    out(
        f"ATen calls compared with FakeTensor: {data['calls_compared']} "
        f"({data['calls_unpredicted']} not predicted)"
    )
    out(f"differences: {len(data['differences'])}; crashes: {data['crashes']}")


def write_expected(differences: dict[str, str], path: Path = EXPECTED_FILE) -> list[str]:
    """Write the expected-differences file; return the keys no reason matches (left out)."""
    grouped: dict[str, list[str]] = {reason: [] for reason in REASONS}
    unclassified = []
    for key, detail in sorted(differences.items()):
        reason = classify(key, detail)
        if reason is None:
            unclassified.append(key)
        else:
            grouped[reason].append(key)
    lines = [
        "# Expected differences of the stride sweep (extension/conformance/strides.py), checked by",
        "# tests/extension/test_ember_strides.py: every difference between an ember result's metadata and",
        "# FakeTensor's prediction must be listed here, and a listed one that agrees now fails the test.",
        '# Entries are "VARIANT aten.OP.OVERLOAD". Generated by',
        "# `python extension/conformance --strides --write-expected PATH` (the reasons: strides_report.py).",
    ]
    for reason, keys in grouped.items():
        if keys:
            lines += ["", f"[{reason}]", f"why = {json.dumps(REASONS[reason][1])}", "differences = ["]
            lines += [f"  {json.dumps(k)}," for k in keys] + ["]"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return unclassified


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, str]:
    """Difference key -> the reason it is expected."""
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    expected: dict[str, str] = {}
    for reason, entry in table.items():
        if not (isinstance(entry.get("why"), str) and entry["why"].strip()):
            raise ValueError(f"{path.name}: [{reason}] needs a `why`")
        for key in entry.get("differences", []):
            if key in expected:
                raise ValueError(f"{path.name}: {key} listed twice ([{expected[key]}] and [{reason}])")
            expected[key] = reason
    return expected
