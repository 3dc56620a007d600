"""Why an (op, dtype) may fail: the reasons the expected-failures file groups its entries under.

A unit is one (kind, op, dtype): kind "forward" (an op in one dtype) or "backward" (an op's float64
input gradients); `unit_key` names it as the summary's failures and the expected-failures file do.
`classify` matches "UNIT KEY: first line of its error" against REASONS; a failure no pattern matches
is left for a person to decide. `load_expected` reads the file (opinfo_expected_failures.toml).
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .compare import BACKWARD_DTYPE

HERE = Path(__file__).resolve().parent
EXPECTED_FILE = HERE / "opinfo_expected_failures.toml"

# reason -> (pattern matched against "KEY: detail", the text the file gives as its `why`).
Reasons = dict[str, tuple[str, str]]

REASONS: Reasons = {
    "convolution": (
        r"convolution_overrideable",
        "ember's convolution computes 2-D, non-transposed convolutions of floating-point tensors; transposed, "
        "1-D/3-D shapes it does not handle and integer or complex inputs raise a clear error naming the case.",
    ),
    "dtype_not_compiled": (
        r"has no ember kernel for \w+ tensors|supports float32, float64 and int64 tensors, got",
        "An ember kernel exists for the operator but its loops are not compiled for this dtype (chapter 04 "
        "keeps the list short on purpose), and it raises rather than compute on the CPU behind the user's back.",
    ),
    "complex_conjugate_views": (
        r"^(forward cov complex64|backward linalg\.eig float64):",
        "ember's complex matrix products read a lazily conjugated view (`.conj()`, `.mH`: is_conj()) as if "
        "it were not conjugated, so cov's values and linalg.eig's backward (whose phase check then raises) "
        "are wrong. A bug in the chapter 14 BLAS kernels, reported; not a tolerance matter.",
    ),
}


def unit_key(kind: str, op: str, dtype: str) -> str:
    return f"{kind} {op} {dtype}"


def classify(key: str, detail: str, reasons: Reasons = REASONS) -> str | None:
    """The reason a failure (`key`, the first line of its error) matches, or None."""
    for reason, (pattern, _why) in reasons.items():
        if re.search(pattern, f"{key}: {detail}"):
            return reason
    return None


def group(failures: dict[str, str], reasons: Reasons = REASONS) -> tuple[dict[str, list[str]], list[str]]:
    """`failures` (key -> detail) grouped by reason, in the reasons' order, and the unclassified keys."""
    grouped: dict[str, list[str]] = {reason: [] for reason in reasons}
    unclassified = []
    for key, detail in sorted(failures.items()):
        reason = classify(key, detail, reasons)
        if reason is None:
            unclassified.append(key)
        else:
            grouped[reason].append(key)
    return grouped, unclassified


def read_expected(path: Path, keys_of: Callable[[dict[str, Any]], list[str]]) -> dict[str, str]:
    """Key -> its reason, from an expected-failures file: one table per reason, with a `why` and the
    keys `keys_of(table)` reads from it; a key listed under two reasons is an error."""
    table = tomllib.loads(path.read_text(encoding="utf-8"))
    expected: dict[str, str] = {}
    for reason, entry in table.items():
        if not (isinstance(entry.get("why"), str) and entry["why"].strip()):
            raise ValueError(f"{path.name}: [{reason}] needs a `why`")
        for key in keys_of(entry):
            if key in expected:
                raise ValueError(f"{path.name}: {key} listed twice ([{expected[key]}] and [{reason}])")
            expected[key] = reason
    return expected


def load_expected(path: Path = EXPECTED_FILE) -> dict[str, str]:
    """Unit key ("forward OP DTYPE" / "backward OP float64") -> the reason it is expected to fail."""

    def keys_of(entry: dict[str, Any]) -> list[str]:
        keys = [unit_key("forward", *pair.split(" ")) for pair in entry.get("forward", [])]
        return keys + [unit_key("backward", op, BACKWARD_DTYPE) for op in entry.get("backward", [])]

    return read_expected(path, keys_of)
