"""GELU runs on ember's own kernels (no CPU fallback) and equals the CPU, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

EMBER = "ember"


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gelu_and_its_gradient_equal_the_cpu(approximate: str, dtype: torch.dtype) -> None:
    x = torch.linspace(-6, 6, 1001, dtype=dtype).reshape(7, 143)[:, ::2]  # strided
    x_cpu = x.clone().requires_grad_()
    x_ember = x.to(EMBER).requires_grad_()
    grad = torch.randn_like(F.gelu(x))
    F.gelu(x_cpu, approximate=approximate).backward(grad)
    out = F.gelu(x_ember, approximate=approximate)
    out.backward(grad.to(EMBER))
    torch.testing.assert_close(out.cpu(), F.gelu(x, approximate=approximate))
    torch.testing.assert_close(x_ember.grad.cpu(), x_cpu.grad)


def test_gelu_in_float16_goes_through_the_host_kernel_and_is_right() -> None:
    x = torch.randn(64, dtype=torch.float16)
    torch.testing.assert_close(F.gelu(x.to(EMBER)).cpu(), F.gelu(x))


def test_gelu_has_ember_kernels_not_the_fallback() -> None:
    for op in ("aten::gelu.out", "aten::gelu_backward.grad_input"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op


def test_gelu_refuses_a_bad_approximation_like_the_cpu() -> None:
    with pytest.raises(RuntimeError, match="approximate argument must be either none or tanh"):
        F.gelu(torch.ones(3, device=EMBER), approximate="cubic")
