"""The installed package's custom operators: the `ember` namespace (chapter 07).

ember::custom_abs (C++: CPU, ember and Meta kernels), ember::custom_l1_loss (a C++ composite
calling custom_abs through the dispatcher) and the Python operators of torch_ember.custom_ops
(ember::soft_shrink, ember::soft_shrink_): eagerly, under FakeTensorMode, under torch.compile, with
opcheck as far as torch 2.13 supports a PrivateUse1 device, and with clear errors for bad input.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import torch
from torch._dynamo.testing import AotEagerAndRecordGraphs
from torch._subclasses.fake_tensor import FakeTensorMode
from torch_ember import custom_ops


def check_results(results: dict[str, object]) -> None:
    """Every opcheck test succeeded, except test_aot_dispatch_dynamic while torch.ember has no RNG state.

    That test runs under torch.testing's freeze_rng_state, which saves and restores the RNG state of
    the current accelerator through its device module; ember is the accelerator once its backend
    name is registered, and its device module gets get_rng_state/set_rng_state with the generator
    (chapter 10).
    """
    expected = dict.fromkeys(results, "SUCCESS")
    aot = results.get("test_aot_dispatch_dynamic")
    if "test_aot_dispatch_dynamic" in results and not hasattr(torch.ember, "get_rng_state"):
        assert isinstance(aot, AttributeError) and "get_rng_state" in str(aot)
        expected["test_aot_dispatch_dynamic"] = aot
    assert results == expected


def sample(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(11)
    return torch.randn(shape, generator=generator, dtype=dtype)


LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "contiguous": lambda t: t,
    "transposed": lambda t: t.T,
    "strided": lambda t: t[::2, 1:],
    "scalar": lambda t: t[0, 0],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_custom_abs_equals_torch_abs(dtype: torch.dtype, layout: str) -> None:
    cpu = LAYOUTS[layout](sample(6, 5, dtype=dtype))
    on_ember = LAYOUTS[layout](sample(6, 5, dtype=dtype).to("ember"))
    result = torch.ops.ember.custom_abs(on_ember)
    assert result.device == torch.device("ember", 0) and result.dtype == dtype
    assert torch.equal(result.cpu(), cpu.abs())
    assert torch.equal(torch.ops.ember.custom_abs(cpu), cpu.abs())


def test_custom_abs_runs_on_the_inputs_device() -> None:
    x = sample(4).to("ember:1")
    assert torch.ops.ember.custom_abs(x).device == torch.device("ember", 1)
    assert torch.ember.current_device() == 0


def test_custom_abs_of_an_empty_tensor() -> None:
    result = torch.ops.ember.custom_abs(torch.empty(0, 3, device="ember"))
    assert result.shape == (0, 3) and result.is_ember


def test_custom_abs_under_fake_tensor_mode() -> None:
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(sample(3, 7, dtype=torch.float64).to("ember:1"))
        out = torch.ops.ember.custom_abs(fake)
    assert out.shape == (3, 7) and out.dtype == torch.float64 and out.device == torch.device("ember", 1)


@pytest.mark.parametrize("dynamic", [False, True])
def test_custom_abs_compiles_in_one_graph_as_one_node(dynamic: bool) -> None:
    torch._dynamo.reset()
    recorded = AotEagerAndRecordGraphs()

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.custom_abs(t) + 1

    compiled = torch.compile(fn, backend=recorded, fullgraph=True, dynamic=dynamic)
    for n in (5, 9):
        x = sample(n)
        assert torch.equal(compiled(x.to("ember")).cpu(), fn(x))
    assert recorded.fw_graphs[-1].code.count("torch.ops.ember.custom_abs.default(") == 1


def test_custom_abs_compiles_with_the_aot_eager_backend() -> None:
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: torch.ops.ember.custom_abs(t) * 3, backend="aot_eager", fullgraph=True)
    x = sample(8)
    assert torch.equal(compiled(x.to("ember")).cpu(), x.abs() * 3)


def test_opcheck_on_cpu() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backward through an op without a derivative may warn
        results = torch.library.opcheck(
            torch.ops.ember.custom_abs.default, (sample(3, 4).requires_grad_(),), raise_exception=False
        )
    check_results(results)


def test_opcheck_on_ember_runs_every_test_213_supports() -> None:
    op = torch.ops.ember.custom_abs.default
    check_results(torch.library.opcheck(op, (sample(3, 4).to("ember"),), raise_exception=False))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        supported = ["test_schema", "test_faketensor", "test_aot_dispatch_dynamic"]
        with_grad = torch.library.opcheck(
            op, (sample(3, 4).to("ember").requires_grad_(),), test_utils=supported, raise_exception=False
        )
    assert set(with_grad) == set(supported)
    check_results(with_grad)
    # torch 2.13's autograd registration check knows only the CPU, CUDA and XPU autograd keys.
    registration = torch.library.opcheck(
        op,
        (sample(3, 4).to("ember").requires_grad_(),),
        test_utils="test_autograd_registration",
        raise_exception=False,
    )["test_autograd_registration"]
    assert isinstance(registration, NotImplementedError)
    assert "NYI devices other than CPU/CUDA/XPU" in str(registration)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.bool])
def test_custom_abs_wrong_dtype_names_op_and_device(dtype: torch.dtype) -> None:
    x = torch.ones(3, dtype=dtype).to("ember:1")
    expected = re.escape("ember::custom_abs: expected a float32 or float64 tensor, got ") + r"\w+ on ember:1"
    with pytest.raises(RuntimeError, match=expected):
        torch.ops.ember.custom_abs(x)


def test_custom_l1_loss_equals_cpu() -> None:
    a, b = sample(4, 3), sample(4, 3) * -2
    result = torch.ops.ember.custom_l1_loss(a.to("ember"), b.to("ember"))
    assert result.is_ember
    assert torch.allclose(result.cpu(), (a - b).abs().mean())


@pytest.mark.parametrize(("first", "second"), [("ember", "cpu"), ("cpu", "ember"), ("ember:0", "ember:1")])
def test_wrong_device_mix_names_op_and_devices(first: str, second: str) -> None:
    a, b = sample(3).to(first), sample(3).to(second)
    expected = f"ember::custom_l1_loss: self is on {a.device} and target on {b.device}; both must be on the same device"
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        torch.ops.ember.custom_l1_loss(a, b)


def test_soft_shrink_forward_and_backward_on_ember() -> None:
    x = torch.tensor([-1.5, 2.0, -0.25, 0.75, 0.5, -0.5])
    expected = torch.nn.functional.softshrink(x, 0.5)
    assert custom_ops.EMBER == "ember"
    leaf = x.to("ember").requires_grad_()
    out = custom_ops.soft_shrink(leaf, 0.5)
    assert torch.equal(out.cpu(), expected)
    out.sum().backward()
    assert torch.equal(leaf.grad.cpu(), (x.abs() > 0.5).to(x.dtype))


def test_soft_shrink_gradcheck_on_cpu() -> None:
    x = torch.tensor([-1.5, 2.0, -0.25, 0.75], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: custom_ops.soft_shrink(t, 0.5), (x,))


def test_soft_shrink_inplace_mutates_and_compiles_to_auto_functionalized() -> None:
    x = torch.tensor([-1.0, 2.0, -3.0, 0.25])
    z = x.to("ember")
    custom_ops.soft_shrink_(z, 0.5)
    assert torch.equal(z.cpu(), torch.nn.functional.softshrink(x, 0.5))
    torch._dynamo.reset()
    recorded = AotEagerAndRecordGraphs()
    z = x.to("ember")
    torch.compile(custom_ops.soft_shrink_, backend=recorded, fullgraph=True)(z, 0.5)
    assert torch.equal(z.cpu(), torch.nn.functional.softshrink(x, 0.5))
    assert "auto_functionalized" in recorded.fw_graphs[0].code


@pytest.mark.parametrize("op", ["soft_shrink", "soft_shrink_"])
def test_python_ops_pass_opcheck_on_ember(op: str) -> None:
    x = torch.tensor([-1.5, 2.0, -0.25, 0.75]).to("ember")
    check_results(torch.library.opcheck(getattr(custom_ops, op), (x, 0.5), raise_exception=False))


def test_meta_kernel_is_registered_in_cpp() -> None:
    table = torch._C._dispatch_dump_table("ember::custom_abs")
    for key in ("CPU", "PrivateUse1", "Meta"):
        assert re.search(rf"^{key}: registered at \S*EmberCustomOps\.cpp:\d+ \[kernel\]$", table, re.M), key
