"""Chapter 04's claims: STUB kernels reached through .out kernels, run as ember kernels, reset when retired.

The backends under test are the chapter's builds: the one it ends with
(`Chapter.of("stub_kernels").parts_through()`), the one with `abs_stub` registered alone, and one
with `abs.out` but no stub kernel (the chapter's third exercise).
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable

import pytest
import torch

import book
from book.builds import builder
from book.parts.cells import CppPart
from book.run.chapter import Chapter

CHAPTER = "stub_kernels"
EMBER = "privateuseone"
LOOP_PARTS = ["stub_registration", "kernel_launch", "dtype_dispatch", "row_loops", "elementwise"]
FAMILY_PARTS = ["abs_stub", "abs_out", "structured_out", "resize_out", "unary_ops", "binary_ops",
                "comparison_ops", "fill_where", "relu_ops", "reductions"]  # fmt: skip


@pytest.fixture(scope="module", autouse=True)
def python_state() -> None:
    """The Python state chapter 04 starts from (the device module of chapter 01)."""
    Chapter.of("stub_kernels").replay_through({})


def own_parts() -> dict[str, CppPart]:
    return {part.name: part for part in Chapter.of("stub_kernels").parts()}


def build(parts: list[CppPart]) -> builder.Build:
    gc.collect()  # ember tensors of the previous test must be gone before a rebuild
    return builder.build(parts=parts, chapter=CHAPTER)


def what_ran(fn: Callable[[], object]) -> tuple[list[str], Counter[str]]:
    trace = book.trace(fn)
    fell_back = [call.name for call in trace.walk() if call.kernel == book.BACKEND_FALLBACK]
    events = Counter(e.direction if e.kind == "memcpy" else e.kind for e in trace.all_events())
    return fell_back, events


def test_the_chapter_shows_its_parts_in_build_order() -> None:
    # abs comes first, on the launch alone; a part keeps the place of its first version.
    names = [part.name for part in Chapter.of("stub_kernels").parts_through() if part.chapter == CHAPTER]
    mine = [name for name in names if name in LOOP_PARTS + FAMILY_PARTS]
    first = ["stub_registration", "kernel_launch", "abs_stub", "abs_out", *LOOP_PARTS[2:]]
    assert mine == first + [name for name in FAMILY_PARTS if name not in first]


def test_the_first_abs_kernel_runs_float32_on_the_launch_alone() -> None:
    # The chapter's first abs_stub, before the loop library: float32 in one launch, other dtypes refused.
    versions = [part for part in Chapter.of("stub_kernels").parts() if part.name == "abs_stub"]
    assert len(versions) == 2 and "unaryLoop" not in versions[0].source
    parts = own_parts()
    build(Chapter.of("fallback").parts_through() + [parts["stub_registration"], parts["kernel_launch"], versions[0],
                                            parts["abs_out"]])  # fmt: skip
    x = torch.tensor([[-1.5, 2.0, -3.0], [4.0, -5.5, 6.0]])
    a = x.to(EMBER)
    fell_back, events = what_ran(lambda: torch.abs(a))
    assert fell_back == [] and events["launch"] == 1 and events["D2H"] == 0
    assert torch.equal(torch.abs(a).cpu(), x.abs())
    assert torch.equal(torch.abs(a.T).cpu(), x.T.abs())  # strided: the loop follows the byte strides
    with pytest.raises(RuntimeError, match="no ember kernel for Double tensors yet"):
        torch.abs(a.double())


def test_abs_stub_alone_changes_nothing() -> None:
    parts = own_parts()
    build(Chapter.of("fallback").parts_through() + [parts[n] for n in [*LOOP_PARTS, "abs_stub"]])
    x = torch.tensor([-1.5, 2.0, -3.0])
    a = x.to(EMBER)
    fell_back, events = what_ran(lambda: torch.abs(a))
    assert fell_back == ["aten::abs.out"]
    assert events["launch"] == 0 and events["D2H"] >= 1
    assert torch.equal(torch.abs(a).cpu(), torch.abs(x))


@pytest.fixture(scope="module")
def chapter_backend() -> builder.Build:
    return build(Chapter.of("stub_kernels").parts_through())


CASES: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "abs": lambda a, b: a.abs(),
    "add_alpha": lambda a, b: torch.add(a, b, alpha=-2),
    "sub": lambda a, b: a - b,
    "mul_scalar": lambda a, b: a * 2.5,
    "div": lambda a, b: a / b,
    "exp": lambda a, b: a.exp(),
    "sigmoid": lambda a, b: torch.sigmoid(a),
    "ge": lambda a, b: a >= b,
    "ne_scalar": lambda a, b: a != 0.5,
    "where": lambda a, b: torch.where(a > b, a, b),
    "relu": lambda a, b: torch.relu(a),
    "relu_grad": lambda a, b: torch.ops.aten.threshold_backward(b, a, 0.0),
    "fill": lambda a, b: a.clone().fill_(7),
    "zero": lambda a, b: b.clone().zero_(),
    "sum": lambda a, b: a.sum(dim=1),
    "mean": lambda a, b: b.mean(),
}


@pytest.mark.parametrize("case", CASES)
def test_family_runs_in_ember_kernels(chapter_backend: builder.Build, case: str) -> None:
    fn = CASES[case]
    generator = torch.Generator().manual_seed(4)
    x, y = torch.randn(5, 6, generator=generator), torch.randn(5, 6, generator=generator)
    a, b = x.to(EMBER), y.to(EMBER)
    fell_back, events = what_ran(lambda: fn(a, b))
    assert fell_back == [] and events["D2H"] == 0 and events["H2D"] == 0
    assert events["launch"] >= 1
    torch.testing.assert_close(fn(a, b).cpu(), fn(x, y))
    torch.testing.assert_close(fn(a.T, b.T).cpu(), fn(x.T, y.T))  # strided
    torch.testing.assert_close(fn(a, b[0]).cpu(), fn(x, y[0]))  # broadcast


def test_sub_reaches_add_stub(chapter_backend: builder.Build) -> None:
    # The chapter registers no kernel for sub_stub: sub.out's implementation calls add_stub with -alpha.
    assert "sub_stub" not in "".join(part.source for part in Chapter.of("stub_kernels").parts())
    a, b = torch.ones(3).to(EMBER), torch.full((3,), 4.0).to(EMBER)
    assert torch.equal(torch.sub(a, b, alpha=2).cpu(), torch.full((3,), -7.0))


def test_unsupported_dtype_is_refused_by_name(chapter_backend: builder.Build) -> None:
    with pytest.raises(RuntimeError, match=r"ember: aten::abs\.out has no ember kernel for Half tensors"):
        torch.ones(2, dtype=torch.half).to(EMBER).abs()


def test_retiring_a_build_empties_the_stub_slot(chapter_backend: builder.Build) -> None:
    x = torch.tensor([-1.0, 2.0])
    assert torch.equal(torch.abs(x.to(EMBER)).cpu(), x.abs())  # the chapter's kernel is in abs_stub's slot
    exercise = Chapter.of("stub_kernels").exercises()["exercise_abs_out_alone"]
    build(
        Chapter.of("fallback").parts_through() + [exercise]
    )  # retires the chapter's build: no stub kernel now
    with pytest.raises(RuntimeError, match="DispatchStub: missing kernel for privateuseone"):
        torch.abs(x.to(EMBER))
