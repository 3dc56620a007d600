"""Autograd on ember in the installed package (csrc/aten/EmberAutograd.cpp and ATen's own formulas).

aten operators differentiate on ember through ATen's kernels at the Autograd alias key; ember::custom_abs has
an autograd kernel of its own (a torch::autograd::Function at AutogradPrivateUse1 and AutogradCPU);
ember::custom_abs_ has none and says so; aten::tanh has an ember-only backward.
"""

from __future__ import annotations

import copy
import warnings

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


def test_tanh_has_an_ember_only_backward_with_the_same_gradients() -> None:
    a = signed_sample(3, 4)
    a_cpu, a_ember = a.clone().requires_grad_(), a.to(EMBER).requires_grad_()
    y_cpu, y_ember = a_cpu.tanh(), a_ember.tanh()
    assert y_ember.grad_fn.name() == "torch::autograd::CppNode<ember::EmberTanhFunction>"
    assert y_cpu.grad_fn.name() == "TanhBackward0"
    (y_cpu**2).sum().backward()
    (y_ember**2).sum().backward()
    torch.testing.assert_close(a_ember.grad.cpu(), a_cpu.grad)
    assert torch.autograd.gradcheck(torch.tanh, (a.to(EMBER).requires_grad_(),))
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::tanh", "AutogradPrivateUse1")
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("aten::tanh", "AutogradCPU")


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
