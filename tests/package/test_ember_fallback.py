"""Operators without an ember kernel run through the CPU fallback and match the CPU exactly.

The fallback copies the inputs to the host, runs the CPU kernel and copies the
result back, so its results are not merely close: they are the same bits. Every
fallback case checks that the call really took that path (the fallback's
`aten::_to_cpu` shows up in a profiler trace), so an operator that gains a
native kernel fails here instead of silently testing nothing.

Operators with native ember kernels (elementwise add/mul, sum, mm, ...) are not
the fallback's: a sum or a matrix product adds in another order than the CPU's,
and the CPU's add with alpha fuses a multiply-add, so they are compared with
`torch.testing.assert_close`'s tolerances for the dtype (exact for integers).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

Op = Callable[..., torch.Tensor]


def inputs(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        return [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]
    return [torch.randint(-100, 100, shape, generator=generator, dtype=dtype) for shape in shapes]


def traced(fn: Callable[[], object]) -> tuple[object, bool]:
    """fn's result, and whether it went through the CPU fallback (which calls aten::_to_cpu)."""
    with profile(activities=[ProfilerActivity.CPU]) as trace:
        result = fn()
    return result, any(event.name == "aten::_to_cpu" for event in trace.events())


def fallback(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    """fn's result, after checking that it ran through the CPU fallback."""
    result, fell_back = traced(fn)
    assert fell_back, "expected the CPU fallback; does the operator have an ember kernel now?"
    assert isinstance(result, torch.Tensor)
    return result


def native(fn: Callable[[], torch.Tensor]) -> torch.Tensor:
    """fn's result, after checking that ember's own kernels ran it (no CPU fallback)."""
    result, fell_back = traced(fn)
    assert not fell_back, "expected a native ember kernel, but the call went through the CPU fallback"
    assert isinstance(result, torch.Tensor)
    return result


# Operators ember has no kernel for (not even for their out= variant).
FALLBACK_CASES: dict[str, tuple[Op, list[tuple[int, ...]]]] = {
    "fmax": (torch.fmax, [(4, 5), (4, 5)]),
    "fmax_broadcast": (torch.fmax, [(4, 5), (5,)]),
    "remainder": (torch.remainder, [(3, 7), (3, 7)]),
    "logaddexp": (torch.logaddexp, [(4, 5), (4, 5)]),
    "atan2_broadcast": (torch.atan2, [(3, 1), (1, 7)]),
    "matmul_vector": (torch.matmul, [(6, 4), (4,)]),  # mv
    "cat": (lambda a, b: torch.cat([a, b], dim=1), [(3, 4), (3, 2)]),
    "cumsum": (lambda a: a.cumsum(dim=1), [(5, 6)]),
    "prod": (torch.prod, [(5, 6)]),
    "amax_dim": (lambda a: a.amax(dim=1), [(5, 6)]),
    "amax_keepdim": (lambda a: a.amax(dim=0, keepdim=True), [(5, 6)]),
}

# Operators with native ember kernels (through their out= variants).
NATIVE_CASES: dict[str, tuple[Op, list[tuple[int, ...]]]] = {
    "add": (torch.add, [(4, 5), (4, 5)]),
    "add_broadcast": (torch.add, [(4, 5), (5,)]),
    "add_alpha": (lambda a, b: torch.add(a, b, alpha=3), [(4, 5), (4, 5)]),
    "add_scalar": (lambda a: a + 2.5, [(4, 5)]),
    "mul": (torch.mul, [(3, 7), (3, 7)]),
    "mul_broadcast": (torch.mul, [(3, 1), (1, 7)]),
    "maximum": (torch.maximum, [(4, 5), (4, 5)]),
    "minimum_broadcast": (torch.minimum, [(4, 5), (5,)]),
    "matmul": (torch.matmul, [(6, 4), (4, 3)]),
    "matmul_batched": (torch.matmul, [(2, 6, 4), (4, 3)]),
    "sum": (torch.sum, [(5, 6)]),
    "sum_dim": (lambda a: a.sum(dim=1), [(5, 6)]),
    "sum_keepdim": (lambda a: a.sum(dim=0, keepdim=True), [(5, 6)]),
}


def check_like(actual: torch.Tensor, expected: torch.Tensor, device: torch.device) -> None:
    assert actual.device == device
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("case", FALLBACK_CASES)
def test_fallback_op_equals_cpu_bit_for_bit(case: str, index: int) -> None:
    op, shapes = FALLBACK_CASES[case]
    cpu_inputs = inputs(*shapes)
    device = torch.device("ember", index)
    expected = op(*cpu_inputs)
    ember_inputs = [t.to(device) for t in cpu_inputs]
    actual = fallback(lambda: op(*ember_inputs))
    check_like(actual, expected, device)
    assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("case", NATIVE_CASES)
def test_native_op_is_close_to_cpu(case: str, index: int) -> None:
    op, shapes = NATIVE_CASES[case]
    cpu_inputs = inputs(*shapes)
    device = torch.device("ember", index)
    expected = op(*cpu_inputs)
    ember_inputs = [t.to(device) for t in cpu_inputs]
    actual = native(lambda: op(*ember_inputs))
    check_like(actual, expected, device)
    torch.testing.assert_close(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float64], ids=str)
def test_ops_match_cpu_for_other_dtypes(dtype: torch.dtype) -> None:
    a, b = inputs((4, 4), (4, 4), dtype=dtype)
    x, y = a.to("ember"), b.to("ember")
    assert torch.equal(fallback(lambda: torch.fmax(x, y)).cpu(), torch.fmax(a, b))
    assert torch.equal(fallback(lambda: x.cumsum(dim=0)).cpu(), a.cumsum(dim=0))
    assert torch.equal(fallback(lambda: x.remainder(7)).cpu(), a.remainder(7))
    # Native: exact for int64 (assert_close compares integers exactly), close for float64.
    torch.testing.assert_close(native(lambda: x + y).cpu(), a + b, rtol=0, atol=0)
    torch.testing.assert_close(native(lambda: x * y).cpu(), a * b, rtol=0, atol=0)
    torch.testing.assert_close(native(lambda: x @ y).cpu(), a @ b)
    torch.testing.assert_close(native(lambda: x.sum()).cpu(), a.sum())


def test_ops_on_non_contiguous_inputs() -> None:
    a, b = inputs((5, 4), (4, 5))
    x, y = a.to("ember"), b.to("ember")
    assert not x.t().is_contiguous()
    assert torch.equal(fallback(lambda: torch.fmax(x.t(), y)).cpu(), torch.fmax(a.t(), b))
    assert torch.equal(fallback(lambda: x[::2].cumsum(dim=0)).cpu(), a[::2].cumsum(dim=0))
    torch.testing.assert_close(native(lambda: x.t() + y).cpu(), a.t() + b, rtol=0, atol=0)
    torch.testing.assert_close(native(lambda: x.t() @ x).cpu(), a.t() @ a)
    torch.testing.assert_close(native(lambda: x[::2].sum(dim=0)).cpu(), a[::2].sum(dim=0))


def test_fallback_in_place_and_out_variants_write_the_ember_tensor() -> None:
    a, b = inputs((3, 4), (3, 4))
    x, y = a.to("ember"), b.to("ember")
    storage = x.untyped_storage().data_ptr()
    fallback(lambda: x.clamp_(-0.5, 0.5))
    fallback(lambda: x.fmod_(0.3))
    assert x.untyped_storage().data_ptr() == storage  # updated in place, not rebound
    assert torch.equal(x.cpu(), a.clamp(-0.5, 0.5).fmod(0.3))
    out = torch.empty(3, 4, device="ember")
    out_storage = out.untyped_storage().data_ptr()
    fallback(lambda: torch.fmax(x, y, out=out))
    assert out.untyped_storage().data_ptr() == out_storage
    assert torch.equal(out.cpu(), torch.fmax(a.clamp(-0.5, 0.5).fmod(0.3), b))


def test_native_in_place_and_out_variants_write_the_ember_tensor() -> None:
    a, b = inputs((3, 4), (3, 4))
    x, y = a.to("ember"), b.to("ember")
    storage = x.untyped_storage().data_ptr()
    native(lambda: x.add_(y))
    native(lambda: x.mul_(2))
    assert x.untyped_storage().data_ptr() == storage
    torch.testing.assert_close(x.cpu(), (a + b) * 2, rtol=0, atol=0)
    out = torch.empty(3, 4, device="ember")
    native(lambda: torch.mul(x, y, out=out))
    torch.testing.assert_close(out.cpu(), ((a + b) * 2) * b, rtol=0, atol=0)


def test_fallback_in_place_op_on_a_view_updates_the_base() -> None:
    (a,) = inputs((4, 4))
    x = a.to("ember")
    fallback(lambda: x[:, 1].fmod_(0.3))
    a[:, 1].fmod_(0.3)
    assert torch.equal(x.cpu(), a)


def test_op_with_cpu_scalar_tensor() -> None:
    (a,) = inputs((3, 3))
    scale = torch.tensor(4.0)  # 0-d CPU tensors may mix with any device, as on CUDA
    x = a.to("ember")
    result = fallback(lambda: torch.fmax(x, scale))
    assert result.is_ember
    assert torch.equal(result.cpu(), torch.fmax(a, scale))
    result = native(lambda: x * scale)
    assert result.is_ember
    torch.testing.assert_close(result.cpu(), a * scale, rtol=0, atol=0)


def test_item_of_an_ember_scalar() -> None:
    (a,) = inputs((3, 3))
    x = a.to("ember")
    assert fallback(lambda: x.prod()).item() == a.prod().item()
    assert native(lambda: x.sum()).item() == pytest.approx(a.sum().item(), rel=1e-6, abs=1e-6)
