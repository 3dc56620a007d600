"""Operators without an ember kernel run through the CPU fallback and match the CPU exactly.

The fallback copies the inputs to the host, runs the CPU kernel and copies the
result back, so the results are not merely close: they are the same bits.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

Op = Callable[..., torch.Tensor]


def inputs(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        return [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]
    return [torch.randint(-100, 100, shape, generator=generator, dtype=dtype) for shape in shapes]


CASES: dict[str, tuple[Op, list[tuple[int, ...]]]] = {
    "add": (torch.add, [(4, 5), (4, 5)]),
    "add_broadcast": (torch.add, [(4, 5), (5,)]),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=3), [(4, 5), (4, 5)]),
    "add_scalar": (lambda a: a + 2.5, [(4, 5)]),
    "mul": (torch.mul, [(3, 7), (3, 7)]),
    "mul_broadcast": (torch.mul, [(3, 1), (1, 7)]),
    "matmul": (torch.matmul, [(6, 4), (4, 3)]),
    "matmul_batched": (torch.matmul, [(2, 6, 4), (4, 3)]),
    "matmul_vector": (torch.matmul, [(6, 4), (4,)]),
    "sum": (torch.sum, [(5, 6)]),
    "sum_dim": (lambda a: a.sum(dim=1), [(5, 6)]),
    "sum_keepdim": (lambda a: a.sum(dim=0, keepdim=True), [(5, 6)]),
}


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("case", CASES)
def test_op_matches_cpu(case: str, index: int) -> None:
    op, shapes = CASES[case]
    cpu_inputs = inputs(*shapes)
    device = torch.device("ember", index)
    expected = op(*cpu_inputs)
    actual = op(*[t.to(device) for t in cpu_inputs])
    assert actual.device == device
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64], ids=str)
def test_ops_match_cpu_for_other_dtypes(dtype: torch.dtype) -> None:
    a, b = inputs((4, 4), (4, 4), dtype=dtype)
    x, y = a.to("ember"), b.to("ember")
    assert torch.equal((x + y).cpu(), a + b)
    assert torch.equal((x * y).cpu(), a * b)
    assert torch.equal((x @ y).cpu(), a @ b)
    assert torch.equal(x.sum().cpu(), a.sum())


def test_ops_on_non_contiguous_inputs() -> None:
    a, b = inputs((5, 4), (4, 5))
    x, y = a.to("ember"), b.to("ember")
    assert torch.equal((x.t() + y).cpu(), a.t() + b)
    assert torch.equal((x.t() @ x).cpu(), a.t() @ a)
    assert torch.equal(x[::2].sum(dim=0).cpu(), a[::2].sum(dim=0))


def test_in_place_and_out_variants_write_the_ember_tensor() -> None:
    a, b = inputs((3, 4), (3, 4))
    x, y = a.to("ember"), b.to("ember")
    storage = x.untyped_storage().data_ptr()
    x.add_(y)
    x.mul_(2)
    assert x.untyped_storage().data_ptr() == storage  # updated in place, not rebound
    assert torch.equal(x.cpu(), (a + b) * 2)
    out = torch.empty(3, 4, device="ember")
    torch.mul(x, y, out=out)
    assert torch.equal(out.cpu(), ((a + b) * 2) * b)


def test_in_place_op_on_a_view_updates_the_base() -> None:
    (a,) = inputs((4, 4))
    x = a.to("ember")
    x[:, 1].mul_(10)
    a[:, 1].mul_(10)
    assert torch.equal(x.cpu(), a)


def test_op_with_cpu_scalar_tensor() -> None:
    (a,) = inputs((3, 3))
    scale = torch.tensor(4.0)  # 0-d CPU tensors may mix with any device, as on CUDA
    result = a.to("ember") * scale
    assert result.is_ember
    assert torch.equal(result.cpu(), a * scale)


def test_item_of_an_ember_scalar() -> None:
    (a,) = inputs((3, 3))
    assert a.to("ember").sum().item() == a.sum().item()
