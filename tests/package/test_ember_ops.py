"""The STUB-kernel family of the installed package equals the CPU and refuses bad input clearly.

Every operator of the family runs PyTorch's OpInfo samples (many shapes, strides,
broadcasts and arguments per dtype) on the CPU and on ember copies of the inputs. A
result must match the CPU's, or ember must refuse the dtype with its own error: never
a different number.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

EMBER = "privateuseone"
FAMILY = [
    "abs", "neg", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
    "add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge",
    "clamp_min", "nn.functional.relu", "where", "fill", "zero_", "sum", "mean",
    "maximum", "minimum",
]  # fmt: skip
DTYPES = [torch.float32, torch.float64, torch.int64, torch.bool]
REFUSAL = "has no ember kernel for"
OPS = {op.name: op for op in op_db if op.name in FAMILY and op.variant_test_name in ("", "no_rounding_mode")}


def to_device(value: Any, device: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, list | tuple):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def test_every_family_member_has_opinfo_samples() -> None:
    assert sorted(OPS) == sorted(FAMILY)


@pytest.mark.parametrize("name", FAMILY)
def test_family_equals_cpu_on_opinfo_samples(name: str) -> None:
    op = OPS[name]
    compared = 0
    for dtype in [d for d in DTYPES if d in op.supported_dtypes("cpu")]:
        for sample in op.sample_inputs("cpu", dtype):
            expected = op(sample.input, *sample.args, **sample.kwargs)
            try:
                actual = op(
                    to_device(sample.input, EMBER),
                    *to_device(sample.args, EMBER),
                    **to_device(sample.kwargs, EMBER),
                )
            except RuntimeError as error:
                assert REFUSAL in str(error), f"{name} {dtype} {sample}: {error}"
                continue
            torch.testing.assert_close(to_device(actual, "cpu"), expected, equal_nan=True)
            compared += 1
    assert compared > 0


@pytest.mark.parametrize(
    "name,fn",
    [
        ("add", lambda a, b: a + b),
        ("exp", lambda a, b: a.exp()),
        ("eq", lambda a, b: a == b),
        ("where", lambda a, b: torch.where(a > 0, a, b)),
        ("sum", lambda a, b: a.sum(dim=0)),
    ],
)
def test_strided_and_broadcast_inputs(name: str, fn: Any) -> None:
    generator = torch.Generator().manual_seed(4)
    base = torch.randn(6, 8, generator=generator)
    other = torch.randn(8, generator=generator)
    cases = [
        (base.T, other[:6]),
        (base[:, ::2], other[::2]),
        (base[:1].expand(6, 8), other),
    ]
    for a, b in cases:
        expected = fn(a, b)
        actual = fn(a.to(EMBER), b.to(EMBER))
        assert actual.device == torch.device(EMBER, 0), name
        torch.testing.assert_close(actual.cpu(), expected)


def test_cpu_scalars_and_type_promotion() -> None:
    ints = torch.tensor([1, -2, 3])
    floats = torch.tensor([0.5, 0.25, 2.0])
    ints_e, floats_e = ints.to(EMBER), floats.to(EMBER)
    for fn in (lambda i, f: i / 2, lambda i, f: i + f, lambda i, f: f * 2.5, lambda i, f: i > 1.5,
               lambda i, f: f + torch.tensor(3.0), lambda i, f: torch.add(i, f, alpha=2)):  # fmt: skip
        expected = fn(ints, floats)
        actual = fn(ints_e, floats_e)
        assert actual.dtype == expected.dtype
        torch.testing.assert_close(actual.cpu(), expected)


def test_out_is_resized_and_written_in_place() -> None:
    a, b = torch.randn(3, 4).to(EMBER), torch.randn(4).to(EMBER)
    out = torch.empty(0, device=EMBER)
    returned = torch.mul(a, b, out=out)
    assert returned is out and out.shape == (3, 4)
    torch.testing.assert_close(out.cpu(), a.cpu() * b.cpu())
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        torch.add(a, b, out=torch.empty(3, 4, dtype=torch.long, device=EMBER))


def test_unsupported_dtype_names_op_dtype_and_device() -> None:
    # Since chapter 14, dtypes the loops lack compute with the CPU's kernels on ember's memory (float16
    # exp works); a dtype the CPU lacks too gets the CPU's error plus the operator and the device.
    with pytest.raises(
        NotImplementedError,
        match=r"(?s)not implemented for 'Float8_e4m3fn'.*ember: in aten::exp\.out on ember:0",
    ):
        torch.ones(3, dtype=torch.float8_e4m3fn).to(EMBER).exp()


def test_mixing_devices_names_the_devices() -> None:
    a = torch.ones(3).to(f"{EMBER}:0")
    with pytest.raises(RuntimeError, match=r"ember:0 and ember:1"):
        a + torch.ones(3).to(f"{EMBER}:1")
    with pytest.raises(RuntimeError, match=r"ember:0 and cpu"):
        a * torch.ones(3)


def test_overlapping_output_is_refused() -> None:
    grid = torch.arange(12.0).reshape(3, 4).to(EMBER)
    with pytest.raises(RuntimeError, match="single memory location"):
        grid[1:].add_(grid[:-1])


def test_kernels_run_on_the_second_device() -> None:
    a = torch.randn(5).to(f"{EMBER}:1")
    result = torch.sigmoid(a) + a
    assert result.device == torch.device(EMBER, 1)
    torch.testing.assert_close(result.cpu(), torch.sigmoid(a.cpu()) + a.cpu())


# ---- torch.mode: ember's own kernel, equal to the CPU's (issue 26) --------------------------------

MODE_DTYPES = [
    torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
    torch.float16, torch.bfloat16, torch.float32, torch.float64,
]  # fmt: skip


def _mode_both(x: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    expected = torch.mode(x, *args, **kwargs)
    actual = torch.mode(x.to(EMBER), *args, **kwargs)
    assert actual.values.device.type == "ember" and actual.indices.dtype == torch.int64
    torch.testing.assert_close(actual.values.cpu(), expected.values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(actual.indices.cpu(), expected.indices)


@pytest.mark.parametrize("dtype", MODE_DTYPES, ids=str)
def test_mode_equals_the_cpu_in_every_dtype_dim_and_keepdim(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    # Few distinct values: many ties, in short rows and in rows long enough for an unstable sort.
    for shape in [(7,), (4, 9), (3, 5, 40), (2, 300)]:
        x = torch.randint(0, 2 if dtype == torch.bool else 4, shape).to(dtype)
        for dim in range(-len(shape), len(shape)):
            for keepdim in (False, True):
                _mode_both(x, dim, keepdim)
    _mode_both(torch.tensor(3).to(dtype))  # 0-dim: itself, at index 0
    _mode_both(torch.randint(0, 4, (5, 6)).to(dtype).T)  # a non-contiguous input


def test_mode_breaks_ties_and_treats_nan_as_the_cpu_does() -> None:
    nan = float("nan")
    rows = [
        [1.0, 2, 2, 1],
        [2.0, 1, 1, 2],
        [nan, nan, 1.0],
        [nan, 1.0, 1.0, nan],
        [-0.0, 0.0, 0.0, -0.0],
    ]
    for row in rows:
        _mode_both(torch.tensor(row))
    # The smallest of the most frequent values, at its last position.
    assert torch.mode(torch.tensor([2.0, 1, 1, 2], device=EMBER)).indices.item() == 2


def test_mode_out_and_its_errors_follow_the_cpu() -> None:
    x = torch.tensor([[1.0, 3, 3], [2, 2, 5]])
    values, indices = (
        torch.empty(0, device=EMBER),
        torch.empty(0, dtype=torch.long, device=EMBER),
    )
    torch.mode(x.to(EMBER), 1, out=(values, indices))
    expected = torch.mode(x, 1)
    assert torch.equal(values.cpu(), expected.values) and torch.equal(indices.cpu(), expected.indices)
    for device in ("cpu", EMBER):
        with pytest.raises(
            IndexError,
            match=r"mode\(\): Expected reduction dim 0 to have non-zero size",
        ):
            torch.mode(torch.empty(0, 3, device=device), 0)
        with pytest.raises(RuntimeError, match="not implemented for 'ComplexFloat'"):
            torch.mode(torch.ones(3, dtype=torch.complex64, device=device))


def test_mode_has_an_ember_kernel_not_the_fallback() -> None:
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mode", "PrivateUse1")
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::mode.values", "PrivateUse1")


# ---- maximum and minimum: ember kernels, not the CPU fallback ------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32])
def test_maximum_minimum_propagate_nan_and_broadcast_as_the_cpu(dtype: torch.dtype) -> None:
    generator = torch.Generator().manual_seed(7)
    a = (torch.randn(6, 8, generator=generator) * 10).to(dtype)
    b = (torch.randn(8, generator=generator) * 10).to(dtype)
    if dtype.is_floating_point:
        a[0, 0], b[1], a[2, 3], b[3] = float("nan"), float("nan"), float("inf"), float("-inf")
    for fn in (torch.maximum, torch.minimum):
        for x, y in ((a, b), (a.T[:, :6], b[:6]), (a[:, ::2], b[::2])):
            torch.testing.assert_close(fn(x.to(EMBER), y.to(EMBER)).cpu(), fn(x, y), equal_nan=True)


def test_maximum_minimum_on_bool_are_or_and() -> None:
    a = torch.tensor([True, True, False, False])
    b = torch.tensor([True, False, True, False])
    assert torch.maximum(a.to(EMBER), b.to(EMBER)).cpu().tolist() == [True, True, True, False]
    assert torch.minimum(a.to(EMBER), b.to(EMBER)).cpu().tolist() == [True, False, False, False]


def test_maximum_minimum_reach_no_cpu_fallback() -> None:
    from torch_ember.bench import fallback_calls

    x, y = torch.randn(4, 5).to(EMBER), torch.randn(5).to(EMBER)
    out = torch.empty(0, device=EMBER)
    x16, y16 = x.half(), y.half()  # float16: the host kernel, on the device's memory
    for call in (lambda: torch.maximum(x, y), lambda: torch.minimum(x, y), lambda: torch.maximum(x, y, out=out),
                 lambda: torch.minimum(x16, y16)):  # fmt: skip
        calls, names = fallback_calls(call)
        assert calls == 0, names
    with pytest.raises(RuntimeError, match="maximum not implemented for complex tensors."):
        torch.maximum(x.to(torch.complex64), y.to(torch.complex64))


# ---- float32 sums: as accurate as the CPU's (issue 26) ----------------------------------------------


def test_float32_sums_are_as_accurate_as_the_cpus() -> None:
    """Sums over every set of dims of a 3-D float32 tensor with cancellation (the inputs of PyTorch's
    test_sum_vs_numpy): ember's error against the float64 sum is never above the CPU's by more than
    an ulp of the result, and a reduction of the innermost run (or of everything) is the float64 sum
    rounded once, since ember accumulates such runs in double."""
    torch.manual_seed(0)
    for _ in range(20):
        x = torch.randn(7, 10, 5) * 60
        x[torch.randn(7, 10, 5) > 0.5] = 0
        for dims in [(0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 2, 1)]:
            exact = x.double().sum(dims, keepdim=True)
            cpu_error = (x.sum(dims, keepdim=True).double() - exact).abs()
            ember = x.to(EMBER).sum(dims, keepdim=True).cpu()
            ulp = torch.finfo(torch.float32).eps * exact.abs().float().clamp_min(1).double()
            assert ((ember.double() - exact).abs() <= cpu_error + ulp).all(), dims
            if dims in [(2,), (1, 2), (0, 2, 1)]:
                assert torch.equal(ember, exact.float())
