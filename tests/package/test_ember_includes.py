"""Every source in extension/csrc includes the ATen operator headers it uses.

With clang, setup.py compiles each file behind a precompiled header that holds
much of ATen, so a file that forgot `ATen/ops/gelu_ops.h` still compiles there.
Without clang (a reader's machine with only g++) the same file fails to build.
This test follows each file's includes (ours and torch's, every branch of a
conditional) and asks that the header declaring each `at::_ops::` struct and
each `at::` operator function the file names is among them.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
import torch

CSRC = Path(__file__).resolve().parents[2] / "extension" / "csrc"
TORCH_INCLUDE = Path(torch.__file__).parent / "include"
OPS = TORCH_INCLUDE / "ATen" / "ops"

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
OPS_STRUCT = re.compile(r"\bat::_ops::(\w+)")
# at::name( or at::name<, not at::native::, at::_ops::, at::cpu:: and the like.
OPS_FUNCTION = re.compile(r"(?<![\w:])at::(\w+)\s*[(<]")
NATIVE_FUNCTION = re.compile(r"\bat::native::(\w+)\s*\(")
DECLARED_STRUCT = re.compile(r"^struct TORCH_API (\w+) \{", re.MULTILINE)


def sources() -> list[Path]:
    return sorted(path for path in CSRC.rglob("*") if path.suffix in {".cpp", ".h"})


@functools.cache
def ops_struct_headers() -> dict[str, str]:
    """`at::_ops` struct name -> the ATen/ops/<op>_ops.h that declares it."""
    owners: dict[str, str] = {}
    for header in OPS.glob("*_ops.h"):
        for name in DECLARED_STRUCT.findall(header.read_text(errors="replace")):
            owners[name] = f"ATen/ops/{header.name}"
    return owners


def resolve(name: str, including: Path) -> Path | None:
    for root in (
        including.parent,
        CSRC,
        TORCH_INCLUDE,
        TORCH_INCLUDE / "torch/csrc/api/include",
    ):
        candidate = root / name
        if candidate.is_file():
            return candidate.resolve()
    return None  # a system header


def direct_includes(path: Path) -> tuple[Path, ...]:
    found = (resolve(name, path) for name in INCLUDE.findall(path.read_text(errors="replace")))
    return tuple(header for header in found if header is not None)


@functools.cache
def installed_includes(header: Path) -> tuple[Path, ...]:
    """A header's includes; headers do not change during a run (the file checked may)."""
    return direct_includes(header)


def include_closure(path: Path) -> set[Path]:
    seen = set(direct_includes(path))
    pending = list(seen)
    while pending:
        for header in installed_includes(pending.pop()):
            if header not in seen:
                seen.add(header)
                pending.append(header)
    return seen


def code_of(path: Path) -> str:
    """The file without comments, which may name operators they do not call."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.DOTALL)
    return re.sub(r"//[^\n]*", "", text)


def missing_headers(path: Path) -> list[str]:
    closure = include_closure(path)
    code = code_of(path)
    missing = []
    for struct in sorted(set(OPS_STRUCT.findall(code))):
        header = ops_struct_headers().get(struct)
        if header is not None and (TORCH_INCLUDE / header).resolve() not in closure:
            missing.append(f"at::_ops::{struct} needs <{header}>")
    for function in sorted(set(OPS_FUNCTION.findall(code))):
        header = OPS / f"{function}.h"
        if header.is_file() and header.resolve() not in closure:
            missing.append(f"at::{function} needs <ATen/ops/{function}.h>")
    for function in sorted(set(NATIVE_FUNCTION.findall(code))):
        if not any(declares_native(header, function) for header in closure):
            missing.append(f"at::native::{function} needs the ATen/native header declaring it")
    return missing


def declares_native(header: Path, function: str) -> bool:
    in_native = header.is_relative_to(TORCH_INCLUDE / "ATen" / "native") or header.name.endswith("_native.h")
    return in_native and re.search(rf"\b{function}\s*\(", text_of(header)) is not None


@functools.cache
def text_of(header: Path) -> str:
    return header.read_text(errors="replace")


def test_the_checker_sees_a_missing_header(tmp_path: Path) -> None:
    unit = tmp_path / "Unit.cpp"
    unit.write_text(
        "#include <ATen/ops/gelu_native.h>\n"
        'auto f(const at::Tensor& x) { return at::_ops::gelu::call(x, "none"); }\n'
        "auto g(const at::Tensor& x) { return at::empty_like(x); }\n"
        "void h(at::Tensor& x) { at::native::resize_output(x, {2}); }\n"
    )
    assert missing_headers(unit) == [
        "at::_ops::gelu needs <ATen/ops/gelu_ops.h>",
        "at::empty_like needs <ATen/ops/empty_like.h>",
        "at::native::resize_output needs the ATen/native header declaring it",
    ]
    unit.write_text("#include <ATen/ops/gelu.h>\n" + unit.read_text())
    assert missing_headers(unit) == [
        "at::empty_like needs <ATen/ops/empty_like.h>",
        "at::native::resize_output needs the ATen/native header declaring it",
    ]


@pytest.mark.parametrize("path", sources(), ids=lambda path: str(path.relative_to(CSRC)))
def test_source_includes_the_operator_headers_it_uses(path: Path) -> None:
    assert missing_headers(path) == []
