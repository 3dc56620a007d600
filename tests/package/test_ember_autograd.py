"""Autograd on ember in the installed package (csrc/aten/EmberAutograd.cpp and ATen's own formulas).

aten operators differentiate on ember through ATen's kernels at the Autograd alias key; ember::custom_abs has
an autograd kernel of its own (a torch::autograd::Function at AutogradPrivateUse1 and AutogradCPU);
ember::custom_abs_ has none and says so; aten::tanh differentiates by ATen's formula, whose tanh_backward
runs ember's kernel, so torch.func's transforms compose on ember as on the CPU.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable

import pytest
import torch

EMBER = "ember"


def signed_sample(*shape: int, seed: int = 6) -> torch.Tensor:
    """float64 values with |x| in [0.1, 1.1): away from 0, where |x| has no derivative."""
    generator = torch.Generator().manual_seed(seed)
    magnitude = torch.rand(*shape, generator=generator, dtype=torch.float64) + 0.1
    sign = torch.where(torch.rand(*shape, generator=generator) < 0.5, -1.0, 1.0).double()
    return magnitude * sign


@pytest.mark.parametrize("device", [EMBER, "cpu"])
def test_custom_abs_passes_gradcheck_in_float64(device: str) -> None:
    x = signed_sample(4, 5).to(device).requires_grad_()
    assert torch.autograd.gradcheck(torch.ops.ember.custom_abs, (x,))


def test_custom_abs_gradient_is_the_sign_and_its_node_is_ours() -> None:
    x = torch.tensor([-1.5, 2.0, -3.0, 0.0], device=EMBER, requires_grad=True)
    y = torch.ops.ember.custom_abs(x)
    assert y.grad_fn.name() == "torch::autograd::CppNode<ember::CustomAbsFunction>"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no autograd-fallback warning: a real kernel ran
        y.sum().backward()
    assert x.grad.cpu().tolist() == [-1.0, 1.0, -1.0, 0.0]


def test_custom_abs_records_nothing_without_grad() -> None:
    x = torch.tensor([-1.0, 2.0], device=EMBER, requires_grad=True)
    with torch.no_grad():
        assert torch.ops.ember.custom_abs(x).grad_fn is None
    assert torch.ops.ember.custom_abs(x.detach()).grad_fn is None


def test_custom_abs_autograd_kernels_sit_at_the_backend_autograd_keys() -> None:
    for key in ("AutogradPrivateUse1", "AutogradCPU"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key("ember::custom_abs", key)


def test_a_small_network_has_the_cpus_gradients_on_ember() -> None:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    net_ember = copy.deepcopy(net).to(EMBER)
    inputs, targets = torch.randn(16, 4), torch.randn(16, 1)
    ((net(inputs) - targets) ** 2).mean().backward()
    ((net_ember(inputs.to(EMBER)) - targets.to(EMBER)) ** 2).mean().backward()
    for p, p_ember in zip(net.parameters(), net_ember.parameters(), strict=True):
        assert p_ember.grad.device.type == EMBER
        torch.testing.assert_close(p_ember.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)


def _fell_back(fn: Callable[[], object]) -> bool:
    """Whether fn reached the CPU fallback (which calls aten::_to_cpu)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as trace:
        fn()
    return any(event.name == "aten::_to_cpu" for event in trace.events())


def test_tanh_differentiates_by_atens_formula_with_embers_tanh_backward() -> None:
    """ATen's autograd kernel records TanhBackward0 on both devices; its formula calls
    tanh_backward, which runs ember's kernel, not the CPU fallback."""
    a = signed_sample(3, 4)
    a_cpu, a_ember = a.clone().requires_grad_(), a.to(EMBER).requires_grad_()
    y_cpu, y_ember = a_cpu.tanh(), a_ember.tanh()
    assert y_ember.grad_fn.name() == y_cpu.grad_fn.name() == "TanhBackward0"
    grad = signed_sample(3, 4, seed=7)
    y_cpu.backward(grad)
    assert not _fell_back(lambda: y_ember.backward(grad.to(EMBER)))
    torch.testing.assert_close(a_ember.grad.cpu(), a_cpu.grad)
    assert torch.autograd.gradcheck(torch.tanh, (a.to(EMBER).requires_grad_(),))
    assert torch.autograd.gradgradcheck(torch.tanh, (a.to(EMBER).requires_grad_(),))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::tanh_backward", "PrivateUse1")


def test_no_aten_operator_has_an_autograd_kernel_of_embers() -> None:
    """A C++ autograd::Function at AutogradPrivateUse1 hides an operator's formulas from torch.func
    ("cannot use C++ torch::autograd::Function with functorch transforms"): the package registers
    none for aten operators, as the CPU has none at AutogradCPU."""
    aten = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("aten::")]
    for key in ("AutogradPrivateUse1", "AutogradCPU"):
        assert [name for name in aten if torch._C._dispatch_has_kernel_for_dispatch_key(name, key)] == []


# ---- torch.func: transforms compose on ember as on the CPU (issue 26) ------------------------------


def _on(device: str, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.to(device) for t in tensors)


def _same_on_both(fn: Callable[..., object], *args: torch.Tensor) -> None:
    """fn's results on ember equal its results on the CPU (every tensor in the pytree)."""
    expected, got = fn(*_on("cpu", *args)), fn(*_on(EMBER, *args))
    flat_expected, spec = torch.utils._pytree.tree_flatten(expected)
    flat_got, spec_got = torch.utils._pytree.tree_flatten(got)
    assert spec == spec_got
    for e, g in zip(flat_expected, flat_got, strict=True):
        assert g.device.type == EMBER
        torch.testing.assert_close(g.cpu(), e)


def _tanh_sum(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x).sum()


def _mixed(x: torch.Tensor) -> torch.Tensor:
    return (torch.tanh(x) * x.sigmoid() + torch.nn.functional.gelu(x)).sum()


@pytest.mark.parametrize("scalar_fn", [_tanh_sum, _mixed], ids=["tanh", "tanh_sigmoid_gelu"])
def test_grad_vmap_jacrev_jacfwd_jvp_and_hessian_equal_the_cpus(scalar_fn: Callable) -> None:
    x = signed_sample(4, 3)
    _same_on_both(torch.func.grad(scalar_fn), x[0])
    _same_on_both(torch.func.vmap(torch.func.grad(scalar_fn)), x)
    _same_on_both(torch.func.jacrev(torch.tanh), x[0])
    _same_on_both(torch.func.jacfwd(torch.tanh), x[0])
    _same_on_both(lambda p, t: torch.func.jvp(torch.tanh, (p,), (t,)), x[0], x[1])
    _same_on_both(torch.func.hessian(scalar_fn), x[0])
    _same_on_both(torch.func.jacfwd(torch.func.jacrev(scalar_fn)), x[0])


def test_per_sample_gradients_of_a_small_mlp_with_functional_call_equal_the_cpus() -> None:
    """The torch.func recipe: a module's parameters as a dict (functional_call), grad over them,
    vmap over the batch; then the Hessian of the loss in one parameter, and jvp in another."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2)).double()
    params = {name: p.detach() for name, p in model.named_parameters()}
    inputs, targets = signed_sample(6, 3, seed=1), signed_sample(6, 2, seed=2)

    def run(device: str) -> tuple[object, ...]:
        on_device = {name: p.to(device) for name, p in params.items()}
        module = copy.deepcopy(model).to(device)
        x, y = inputs.to(device), targets.to(device)

        def loss(p: dict[str, torch.Tensor], xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
            out = torch.func.functional_call(module, p, (xi.unsqueeze(0),))
            return torch.nn.functional.mse_loss(out, yi.unsqueeze(0))

        per_sample = torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))(on_device, x, y)

        def bias_loss(b: torch.Tensor) -> torch.Tensor:
            return loss({**on_device, "2.bias": b}, x[0], y[0])

        hessian = torch.func.hessian(bias_loss)(on_device["2.bias"])

        def outputs(w: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(module, {**on_device, "0.weight": w}, (x,))

        tangent = torch.ones_like(on_device["0.weight"])
        _, forward = torch.func.jvp(outputs, (on_device["0.weight"],), (tangent,))
        return per_sample, hessian, forward

    expected, got = run("cpu"), run(EMBER)
    flat_expected, _ = torch.utils._pytree.tree_flatten(expected)
    flat_got, _ = torch.utils._pytree.tree_flatten(got)
    for e, g in zip(flat_expected, flat_got, strict=True):
        assert g.device.type == EMBER
        torch.testing.assert_close(g.cpu(), e)


FORWARD_AD_CASES: dict[str, tuple[Callable[..., torch.Tensor], tuple[tuple[int, ...], ...]]] = {
    "mm": (torch.mm, ((3, 4), (4, 5))),
    "linear": (torch.nn.functional.linear, ((3, 4), (5, 4), (5,))),
    "bmm": (torch.bmm, ((2, 3, 4), (2, 4, 5))),
    "relu": (torch.relu, ((3, 4),)),
    "gelu": (torch.nn.functional.gelu, ((3, 4),)),
    "softmax": (lambda x: torch.softmax(x, -1), ((3, 4),)),
    "log_softmax": (lambda x: torch.log_softmax(x, -1), ((3, 4),)),
    "layer_norm": (lambda x, w, b: torch.nn.functional.layer_norm(x, (4,), w, b), ((3, 4), (4,), (4,))),
    "group_norm": (lambda x: torch.nn.functional.group_norm(x, 2), ((2, 4, 3),)),
    "batch_norm": (lambda x: torch.nn.functional.batch_norm(x, None, None, training=True), ((5, 3),)),
    "conv2d": (lambda x, w: torch.nn.functional.conv2d(x, w, padding=1), ((1, 2, 5, 5), (3, 2, 3, 3))),
    "max_pool2d": (lambda x: torch.nn.functional.max_pool2d(x, 2), ((1, 2, 4, 4),)),
    "mse_loss": (torch.nn.functional.mse_loss, ((3, 4), (3, 4))),
    "smooth_l1_loss": (torch.nn.functional.smooth_l1_loss, ((3, 4), (3, 4))),
    "exp_log_sin_cos": (lambda x: x.exp() + x.abs().log() + x.sin() * x.cos(), ((3, 4),)),
    "sigmoid_rsqrt_sqrt": (lambda x: x.sigmoid() + x.abs().rsqrt() + x.abs().sqrt(), ((3, 4),)),
    "sum_mean_where": (lambda x, y: torch.where(x > 0, x, y).sum(0) + x.mean(0), ((3, 4), (3, 4))),
}


@pytest.mark.parametrize("name", sorted(FORWARD_AD_CASES))
def test_forward_mode_ad_through_embers_kernels_equals_the_cpus(name: str) -> None:
    """jvp runs ATen's forward formulas over ember's own kernels (these operators have ember kernels,
    no fallback): the tangents equal the CPU's."""
    fn, shapes = FORWARD_AD_CASES[name]
    primals = tuple(signed_sample(*shape, seed=i) for i, shape in enumerate(shapes))
    tangents = tuple(signed_sample(*shape, seed=10 + i) for i, shape in enumerate(shapes))
    n = len(primals)
    _same_on_both(lambda *a: torch.func.jvp(fn, a[:n], a[n:]), *primals, *tangents)


@pytest.mark.parametrize("device", [EMBER, "cpu"])
def test_custom_abs_inplace_has_no_derivative_and_says_so(device: str) -> None:
    x = torch.tensor([-1.0, 2.0], device=device, requires_grad=True)
    y = x * 1
    torch.ops.ember.custom_abs_(y)
    assert y.cpu().tolist() == [1.0, 2.0]
    assert y.grad_fn.name() == "torch::autograd::NotImplemented"
    with pytest.raises(RuntimeError, match="derivative for ember::custom_abs_ is not implemented"):
        y.sum().backward()


@pytest.mark.parametrize("device", [EMBER, "cpu"])
def test_custom_abs_inplace_bumps_the_version_of_what_it_writes(device: str) -> None:
    x = torch.tensor([-1.0, 2.0], device=device, requires_grad=True)
    y = x * 1
    squared = y**2  # saves y for its backward
    torch.ops.ember.custom_abs_(y)
    assert y._version == 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        squared.sum().backward()


def test_custom_abs_inplace_works_without_grad() -> None:
    x = torch.tensor([-1.0, 2.0, -0.5], device=EMBER)
    assert torch.ops.ember.custom_abs_(x) is not None
    assert x.cpu().tolist() == [1.0, 2.0, 0.5]
