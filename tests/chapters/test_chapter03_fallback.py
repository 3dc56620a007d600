"""Chapter 03's checkpoints: the CPU fallback computes what the CPU computes and refuses what it gets wrong.

The backend under test is the one chapter 03 ends with: the C++ of chapters 01 and 02
(read from their notebooks, as `book.build()` reads them) and every `%%cpp` cell of
chapter 03.
"""

from __future__ import annotations

import gc
import re
import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

from book.builds import builder
from book.parts.cells import resolve
from book.run.chapter import Chapter

CHAPTER = "fallback"
NOTEBOOK = Chapter.of(CHAPTER).notebook  # locations name the notebook file
EMBER = "privateuseone"


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    yield Chapter.of("fallback").build()
    gc.collect()  # let the next module's build unload this one


def inputs(*shapes: tuple[int, ...]) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return [torch.randn(shape, generator=generator) for shape in shapes]


CASES: dict[str, tuple[Callable[..., torch.Tensor], list[tuple[int, ...]]]] = {
    "add": (torch.add, [(4, 5), (4, 5)]),
    "add_broadcast": (torch.add, [(4, 5), (5,)]),
    "mul": (torch.mul, [(3, 7), (3, 7)]),
    "matmul": (torch.matmul, [(6, 4), (4, 3)]),
    "sum": (torch.sum, [(5, 6)]),
    "sum_dim": (lambda t: t.sum(dim=1), [(5, 6)]),
}


@pytest.mark.parametrize("case", CASES)
def test_fallback_matches_cpu(case: str) -> None:
    op, shapes = CASES[case]
    cpu = inputs(*shapes)
    expected = op(*cpu)
    actual = op(*[t.to(EMBER) for t in cpu])
    assert actual.device == torch.device(EMBER, 0)
    assert torch.equal(actual.cpu(), expected)


def test_in_place_add_on_a_view_mutates_the_ember_tensor() -> None:
    a, b = inputs((4, 4), (4,))
    x = a.to(EMBER)
    storage = x.untyped_storage().data_ptr()
    x[:, 1].add_(b.to(EMBER))
    a[:, 1].add_(b)
    assert x.untyped_storage().data_ptr() == storage
    assert torch.equal(x.cpu(), a)


def test_results_stay_on_the_inputs_device() -> None:
    a, b = inputs((3, 3), (3, 3))
    result = a.to(f"{EMBER}:1") @ b.to(f"{EMBER}:1")
    assert result.device == torch.device(EMBER, 1)
    assert torch.equal(result.cpu(), a @ b)


def test_factories_without_tensor_arguments_fall_back() -> None:
    assert torch.equal(torch.arange(5, device=EMBER).cpu(), torch.arange(5))
    indices = torch.tril_indices(3, 3, device=f"{EMBER}:1")
    assert indices.device == torch.device(EMBER, 1)
    assert torch.equal(indices.cpu(), torch.tril_indices(3, 3))


def test_allclose_has_its_own_kernel() -> None:
    table = torch._C._dispatch_dump_table("aten::allclose")
    assert f"PrivateUse1: registered at {NOTEBOOK}.ipynb[fallback_allclose]" in table
    a, b = inputs((4,), (4,))
    assert torch.allclose(a.to(EMBER), a.to(EMBER))
    assert not torch.allclose(a.to(EMBER), b.to(EMBER))


def test_the_cpus_out_kernel_warns_for_a_0_dim_loss() -> None:
    # Why mse_loss needs its own registration: its default kernel hands mse_loss.out a 0-dim
    # result, and the CPU's out= kernel (meta function: a TensorIterator over the out= tensor,
    # then resize_ to 0-dim) resizes a 0-dim out= tensor to the inputs' shape first, with a
    # warning, for CPU tensors too. If PyTorch stops warning, the registration is no longer needed.
    a, b = inputs((8, 3), (8, 3))
    out = torch.empty(())
    with pytest.warns(UserWarning, match="An output with one or more elements was resized"):
        torch._C._nn.mse_loss(a, b, 1, out=out)  # 1: Reduction::Mean
    assert out.shape == () and torch.equal(out, torch.nn.functional.mse_loss(a, b))


@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_functional_losses_warn_nothing_and_equal_the_cpus(loss: str, reduction: str) -> None:
    table = torch._C._dispatch_dump_table(f"aten::{loss}")
    assert f"PrivateUse1: registered at {NOTEBOOK}.ipynb[fallback_allclose]" in table
    a, b = inputs((8, 3), (8, 3))
    function = getattr(torch.nn.functional, loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actual = function(a.to(EMBER), b.to(EMBER), reduction=reduction)
    assert actual.device == torch.device(EMBER, 0)
    assert torch.equal(actual.cpu(), function(a, b, reduction=reduction))


@pytest.mark.parametrize(
    ("call", "op", "reason"),
    [
        (lambda x: x.unfold(0, 2, 1), "aten::unfold", "it returns a view of its input"),
        (lambda x: torch.randn(3, device=EMBER), "aten::normal_", "it draws random numbers"),
        (lambda x: torch.rand(3, device=EMBER), "aten::uniform_", "it draws random numbers"),
    ],
    ids=["view", "normal_", "uniform_"],
)
def test_blocked_operators_raise_a_clear_error(
    call: Callable[[torch.Tensor], object], op: str, reason: str
) -> None:
    x = torch.arange(6.0).to(EMBER)
    expected = f"ember: {op} has no ember kernel and cannot fall back to the CPU because {reason}"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        call(x)


@pytest.mark.parametrize(
    ("call", "op"),
    [
        (lambda x0, x1: x0 @ x1, "aten::mm.out"),
        (lambda x0, x1: torch.cat([x0, x1]), "aten::cat.out"),
    ],
    ids=["mm", "cat"],
)
def test_two_ember_devices_raise_a_clear_error(
    call: Callable[[torch.Tensor, torch.Tensor], object], op: str
) -> None:
    a, b = inputs((3, 3), (3, 3))
    expected = (
        f"ember: {op} got tensors on two ember devices, {EMBER}:0 and {EMBER}:1; "
        f"the CPU fallback would return the result on {EMBER}:0 alone"
    )
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        call(a.to(f"{EMBER}:0"), b.to(f"{EMBER}:1"))


def test_cpu_scalar_tensors_may_mix_with_ember_tensors() -> None:
    (a,) = inputs((3, 3))
    scale = torch.tensor(4.0)
    assert torch.equal((a.to(EMBER) * scale).cpu(), a * scale)


def test_device_memory_returns_to_zero() -> None:
    gc.collect()
    before = builder.live_device_allocations()
    a, b = inputs((64, 64), (64, 64))
    x, y = a.to(EMBER), b.to(f"{EMBER}:1")
    results = [x + x, x @ x, x.sum(), y * y, torch.arange(10, device=EMBER)]
    x.add_(1)
    assert builder.live_device_allocations()[0] > before[0]
    del x, y, results
    gc.collect()
    assert builder.live_device_allocations() == (0, 0)


def test_the_first_version_of_the_fallback_has_no_rules() -> None:
    # Chapter 03's first cpu_fallback cell (version 1, chapters/history) falls back for everything,
    # views included; its revision (what the module's backend holds) refuses them.
    chapter = Chapter.of("fallback")
    first = next(p for p in chapter.parts() if p.name == "cpu_fallback")
    parts = [first if p.name == "cpu_fallback" else p for p in chapter.parts_before() + [first]]
    gc.collect()
    builder.build(parts=resolve(parts), chapter=chapter.slug)
    try:
        a = torch.arange(6.0).reshape(2, 3).to(EMBER)
        assert torch.equal((a + a).cpu(), torch.arange(6.0).reshape(2, 3) * 2)
        with pytest.warns(UserWarning, match="appears to be a view operator"):
            windows = a.unfold(1, 2, 1)  # version 2 refuses this view
        assert windows.shape == (2, 2, 2)
        del a, windows
    finally:
        gc.collect()
        chapter.build()  # back to the chapter's backend for the tests after this one
    with pytest.raises(RuntimeError, match="unfold"):
        torch.arange(6.0).reshape(2, 3).to(EMBER).unfold(1, 2, 1)
