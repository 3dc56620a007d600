"""Chapter 06's convolution (on chapter 05's matrix products), as the chapter builds them.

The chapter shows two versions of the `convolution` part. The first registers a kernel for
`conv2d` (a CompositeImplicitAutograd operator) at PrivateUse1: forward is right, but autograd
falls to the autograd fallback and the gradients are silently lost. The second overrides
`convolution_overrideable` and `convolution_backward_overrideable`, and gradients equal the CPU's.

backward() on ember needs the backend name registered (chapter 08 does it), so every backward
runs in a child process that registers it first (book.run_isolated, same build loaded).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch
import torch.nn.functional as F

from book import run_isolated
from book.builds import builder
from book.parts.cells import CppPart, resolve
from book.run.chapter import Chapter

EMBER = "privateuseone"
PART = "convolution"


def chapter() -> Chapter:
    return Chapter.of("convolution")


def versions() -> list[CppPart]:
    """Every version of the convolution part the chapter shows, in cell order."""
    shown = [part for part in chapter().parts() if part.name == PART]
    assert len(shown) == 2, f"chapter 06 shows {len(shown)} versions of {PART!r}, expected 2"
    return shown


def build(version: CppPart) -> builder.Build:
    """The chapter's backend with `version` of the convolution part in its place."""
    parts = [version if part.name == PART else part for part in chapter().parts_through()]
    chapter().replay_through({})  # the Python state the chapter has (the device module)
    gc.collect()  # the previous build's ember tensors must be gone
    return builder.build(parts=resolve(parts), chapter=chapter().slug)


@pytest.fixture(scope="module")
def first_version() -> Iterator[builder.Build]:
    yield build(versions()[0])
    gc.collect()


@pytest.fixture(scope="module")
def latest_version(first_version: builder.Build) -> Iterator[builder.Build]:
    # Depends on first_version so that the two builds load in this order, once each.
    yield build(versions()[1])
    gc.collect()


BACKWARD = """
import copy, warnings
{register}
torch.manual_seed(0)
conv = torch.nn.Conv2d(4, 6, 3, padding=1, groups=2).double()
conv_e = copy.deepcopy(conv).to("privateuseone")
x = torch.randn(2, 4, 7, 8, dtype=torch.float64)
conv(x).square().sum().backward()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    conv_e(x.to("privateuseone")).square().sum().backward()
for warning in caught:
    print("WARNING", str(warning.message).splitlines()[0])
for name, p in conv.named_parameters():
    p_e = dict(conv_e.named_parameters())[name]
    if p_e.grad is None:
        print("NOGRAD", name)
    else:
        print("GRAD", name, str(p_e.grad.device), torch.allclose(p_e.grad.cpu(), p.grad))
"""
REGISTER = 'torch.utils.rename_privateuse1_backend("privateuseone")'


def test_the_first_version_registers_conv2d_and_loses_autograd(first_version: builder.Build) -> None:
    table = torch._C._dispatch_dump_table("aten::conv2d")
    assert "PrivateUse1: registered at 06_convolution.ipynb[convolution]" in table
    autograd = next(line for line in table.splitlines() if line.startswith("AutogradPrivateUse1:"))
    assert "VariableFallbackKernel.cpp" in autograd and "[backend fallback]" in autograd
    assert torch._C._get_autograd_fallback_mode() == "warn"
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    w_e = w.to(EMBER).requires_grad_()
    y = F.conv2d(x.to(EMBER), w_e)
    torch.testing.assert_close(y.cpu(), F.conv2d(x, w), rtol=1e-5, atol=1e-5)  # forward is right
    assert y.grad_fn is not None and y.grad_fn.name() == "torch::autograd::WarnNotImplemented"


def test_the_first_version_silently_loses_the_gradients(first_version: builder.Build) -> None:
    result = run_isolated(BACKWARD.format(register=REGISTER))
    assert result.ok, str(result)
    lines = result.stdout.splitlines()
    assert "NOGRAD weight" in lines and "NOGRAD bias" in lines
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert any("aten::conv2d: an autograd kernel was not registered" in line for line in warnings), lines


def test_backward_needs_the_backend_name(first_version: builder.Build) -> None:
    # Without chapter 08's registration the autograd engine refuses ember tensors.
    result = run_isolated(BACKWARD.format(register=""))
    assert not result.ok
    assert "Cannot access accelerator device when none is available." in result.stderr


def test_the_latest_version_keeps_autograd(latest_version: builder.Build) -> None:
    table = torch._C._dispatch_dump_table("aten::conv2d")
    assert "06_convolution.ipynb" not in table  # conv2d keeps its composite kernel
    for op in ("aten::convolution_overrideable", "aten::convolution_backward_overrideable"):
        assert (
            "PrivateUse1: registered at 06_convolution.ipynb[convolution]"
            in torch._C._dispatch_dump_table(op)
        )
    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    y = F.conv2d(x.to(EMBER), w.to(EMBER).requires_grad_())
    torch.testing.assert_close(y.cpu(), F.conv2d(x, w), rtol=1e-5, atol=1e-5)
    assert y.grad_fn is not None and y.grad_fn.name() == "ConvolutionBackward0"


def test_the_latest_version_computes_the_cpu_gradients(latest_version: builder.Build) -> None:
    result = run_isolated(BACKWARD.format(register=REGISTER))
    assert result.ok, str(result)
    lines = result.stdout.splitlines()
    assert not [line for line in lines if line.startswith(("WARNING", "NOGRAD"))], lines
    assert "GRAD weight privateuseone:0 True" in lines and "GRAD bias privateuseone:0 True" in lines


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups"),
    [(1, 0, 1, 1), (2, 1, 1, 1), (1, 2, 2, 2), ((1, 2), (1, 0), (2, 1), 4)],
)
def test_convolution_backward_matches_cpu_in_process(
    latest_version: builder.Build, stride: object, padding: object, dilation: object, groups: int
) -> None:
    # aten::convolution_backward called directly (no autograd engine): ember's backward kernel.
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 4, 11, 10, dtype=torch.float64, generator=gen)
    w = torch.randn(8, 4 // groups, 3, 3, dtype=torch.float64, generator=gen)
    b = torch.randn(8, dtype=torch.float64, generator=gen)
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    y = F.conv2d(*leaves, stride, padding, dilation, groups)
    grad_y = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    expected = torch.autograd.grad(y, leaves, grad_y)

    def pair(v: object) -> list[int]:
        return [v, v] if isinstance(v, int) else list(v)  # type: ignore[arg-type]

    actual = torch.ops.aten.convolution_backward(
        grad_y.to(EMBER),
        x.to(EMBER),
        w.to(EMBER),
        [8],
        pair(stride),
        pair(padding),
        pair(dilation),
        False,
        [0, 0],
        groups,
        [True, True, True],
    )
    for a, e in zip(actual, expected, strict=True):
        assert a.device.type == EMBER
        torch.testing.assert_close(a.cpu(), e)


def test_matrix_products_run_on_ember_kernels(latest_version: builder.Build) -> None:
    for op in ("aten::mm.out", "aten::addmm.out", "aten::bmm.out"):
        assert (
            "PrivateUse1: registered at 05_matrix_products.ipynb[blas_ops]"
            in torch._C._dispatch_dump_table(op)
        )
    gen = torch.Generator().manual_seed(5)
    a, b, bias = (
        torch.randn(9, 70, generator=gen),
        torch.randn(70, 300, generator=gen),
        torch.randn(300, generator=gen),
    )
    batch = torch.randn(3, 9, 70, generator=gen)
    ae, be, bias_e, batch_e = a.to(EMBER), b.to(EMBER), bias.to(EMBER), batch.to(EMBER)
    torch.testing.assert_close((ae @ be).cpu(), a @ b, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close((be.T @ ae.T).cpu(), b.T @ a.T, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(
        torch.addmm(bias_e, ae, be).cpu(), torch.addmm(bias, a, b), rtol=1e-5, atol=1e-4
    )
    torch.testing.assert_close(
        torch.bmm(batch_e, batch_e.transpose(1, 2)).cpu(),
        torch.bmm(batch, batch.transpose(1, 2)),
        rtol=1e-5,
        atol=1e-4,
    )
    ints = (a * 10).long()
    assert torch.equal((ints.to(EMBER) @ ints.to(EMBER).T).cpu(), ints @ ints.T)
