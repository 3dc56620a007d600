"""Attention on the installed torch_ember (chapter 09): scaled_dot_product_attention asks ember's
choice (`_fused_sdp_choice_stub` and the `aten::_fused_sdp_choice` operator), runs ember's kernel for
`_scaled_dot_product_fused_attention_overrideable` and its backward, and equals the math path and the
CPU, forward and backward, in float32 and under autocast; the caller's `sdpa_kernel` choice holds."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

EMBER = "ember"
sdpa = torch.nn.functional.scaled_dot_product_attention
FUSED = [SDPBackend.OVERRIDEABLE, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]


def qkv(*shape: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(shape, generator=generator) for _ in range(3)]


def attend(
    tensors: list[torch.Tensor],
    device: str,
    backends: list[SDPBackend],
    autocast: bool = False,
    mask: torch.Tensor | None = None,
    **options: object,
) -> tuple[list[torch.Tensor], str]:
    """The output and the gradients of query, key, value (and a float mask), and the grad_fn's name."""
    leaves = [t.to(device, copy=True).requires_grad_() for t in tensors]
    if mask is not None:
        mask = mask.to(device, copy=True)
        if mask.is_floating_point():
            mask.requires_grad_()
    with sdpa_kernel(backends), torch.autocast(EMBER, enabled=autocast):
        out = sdpa(*leaves, attn_mask=mask, **options)
    out.float().pow(2).sum().backward()
    grads = [t.grad for t in leaves] + ([mask.grad] if mask is not None and mask.requires_grad else [])
    return [out.detach().cpu()] + [g.cpu() for g in grads], out.grad_fn.name()


def close(results: list[torch.Tensor], reference: list[torch.Tensor], tolerance: float) -> bool:
    return all(
        bool((r.float() - e.float()).abs().max() <= tolerance * e.float().abs().max())
        for r, e in zip(results, reference, strict=True)
    )


def test_ember_chooses_the_overrideable_backend() -> None:
    q, k, v = (t.to(EMBER) for t in qkv(2, 3, 5, 4))
    assert torch._fused_sdp_choice(q, k, v) == SDPBackend.OVERRIDEABLE.value
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, k, v) == SDPBackend.MATH.value
    # What the kernel does not take goes to the math path.
    assert torch._fused_sdp_choice(q, k, v, dropout_p=0.5) == SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q[0], k[0], v[0]) == SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q.double(), k.double(), v.double()) == SDPBackend.MATH.value
    assert torch._fused_sdp_choice(q, k[:, :1], v[:, :1], enable_gqa=True) == SDPBackend.MATH.value


def test_no_backend_left_is_a_clear_error() -> None:
    q, k, v = (t.to(EMBER) for t in qkv(2, 3, 5, 4))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION), pytest.raises(RuntimeError, match="no backend"):
        sdpa(q, k, v)


@pytest.mark.parametrize(
    ("case", "options"),
    [
        ("plain", {}),
        ("causal", {"is_causal": True}),
        ("scale", {"scale": 0.3}),
        ("bool_mask", {"mask": "bool"}),
        ("float_mask", {"mask": "float"}),
        ("cross", {"shape_kv": (2, 3, 7, 4)}),
    ],
)
def test_kernel_equals_the_math_path_and_the_cpu(case: str, options: dict) -> None:
    options = dict(options)
    q, _, _ = qkv(2, 3, 5, 4)
    _, k, v = qkv(*options.pop("shape_kv", (2, 3, 5, 4)))
    mask = options.pop("mask", None)
    if mask == "bool":
        mask = torch.rand(5, k.size(2), generator=torch.Generator().manual_seed(1)) > 0.3
    elif mask == "float":
        mask = torch.randn(2, 1, 5, k.size(2), generator=torch.Generator().manual_seed(1))
    kernel, grad_fn = attend([q, k, v], EMBER, FUSED, mask=mask, **options)
    math, math_grad_fn = attend([q, k, v], EMBER, [SDPBackend.MATH], mask=mask, **options)
    cpu, _ = attend([q, k, v], "cpu", FUSED, mask=mask, **options)
    assert grad_fn == "ScaledDotProductFusedAttentionOverrideableBackward0"
    assert math_grad_fn != grad_fn
    assert close(kernel, math, 1e-5), case
    assert close(kernel, cpu, 1e-5), case


def test_a_fully_masked_row_gives_zeros_as_the_math_path() -> None:
    q, k, v = qkv(1, 1, 3, 4)
    mask = torch.ones(3, 3, dtype=torch.bool)
    mask[1] = False
    kernel, _ = attend([q, k, v], EMBER, FUSED, mask=mask)
    math, _ = attend([q, k, v], EMBER, [SDPBackend.MATH], mask=mask)
    assert torch.equal(kernel[0][0, 0, 1], torch.zeros(4))
    assert close(kernel, math, 1e-5)


def test_autocast_runs_attention_in_float16() -> None:
    q, k, v = qkv(2, 3, 5, 4)
    kernel, grad_fn = attend([q, k, v], EMBER, FUSED, autocast=True, is_causal=True)
    math, _ = attend([q, k, v], EMBER, [SDPBackend.MATH], autocast=True, is_causal=True)
    cpu, _ = attend([q, k, v], "cpu", FUSED, is_causal=True)
    assert grad_fn == "ScaledDotProductFusedAttentionOverrideableBackward0"
    assert kernel[0].dtype == torch.float16
    assert all(g.dtype == torch.float32 for g in kernel[1:])
    assert close(kernel, math, 1e-2)
    assert close(kernel, cpu, 1e-2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lower_precision_inputs_compute_in_float32(dtype: torch.dtype) -> None:
    q, k, v = (t.to(dtype) for t in qkv(2, 3, 5, 4))
    out = sdpa(q.to(EMBER), k.to(EMBER), v.to(EMBER))
    reference = sdpa(q.float(), k.float(), v.float()).to(dtype)
    assert out.dtype == dtype
    torch.testing.assert_close(out.cpu(), reference)


def _under_math(fn: Callable[[], object]) -> object:
    with sdpa_kernel(SDPBackend.MATH):
        return fn()


@pytest.mark.parametrize(
    "transform",
    ["vmap", "vmap_mask", "vmap_query_only", "vmap_grad", "grad", "jacrev", "jvp", "hessian"],
)
def test_torch_func_over_attention_equals_the_cpus(transform: str) -> None:
    """Each transform over scaled_dot_product_attention on ember equals the CPU's, and its math path.

    The composite calls ember's choice (`_fused_sdp_choice_stub`) with the transform's own tensors, and
    the choice sends them to the math path: the overrideable kernel has no batching rule, and functorch's
    loop over the batch refuses an operator that returns integers. The CPU's default path, its flash
    kernel, has no batching rule either (the loop runs it, with a warning) and no tangent formula: forward
    mode (jvp, and hessian's jacfwd) fails there and works on ember."""
    q, k, v = (
        t.unsqueeze(0).repeat(3, 1, 1, 1, 1) + torch.arange(3.0).view(3, 1, 1, 1, 1) for t in qkv(2, 3, 5, 4)
    )
    mask = torch.randn(3, 5, 5, generator=torch.Generator().manual_seed(1))
    small = [t[0, :1, :1, :3, :2].contiguous() for t in (q, k, v)]

    def run(device: str) -> torch.Tensor:
        qd, kd, vd, md = (t.to(device) for t in (q, k, v, mask))
        sq, sk, sv = (t.to(device) for t in small)
        func = torch.func
        if transform == "vmap":
            return func.vmap(sdpa)(qd, kd, vd)
        if transform == "vmap_mask":
            return func.vmap(lambda q, k, v, m: sdpa(q, k, v, attn_mask=m))(qd, kd, vd, md)
        if transform == "vmap_query_only":
            return func.vmap(lambda q: sdpa(q, kd[0], vd[0], is_causal=True))(qd)
        if transform == "vmap_grad":
            return func.vmap(func.grad(lambda q, k: sdpa(q, k, vd[0]).pow(2).sum()))(qd, kd)
        if transform == "grad":
            return func.grad(lambda q: sdpa(q, kd[0], vd[0]).pow(2).sum())(qd[0])
        if transform == "jacrev":
            return func.jacrev(lambda q: sdpa(q, sk, sv))(sq)
        if transform == "jvp":
            return func.jvp(lambda q: sdpa(q, kd[0], vd[0]), (qd[0],), (qd[1],))[1]
        return func.hessian(lambda q: sdpa(q, sk, sv).pow(2).sum())(sq)

    with warnings.catch_warnings():  # the CPU's loop over the batch warns of its speed
        warnings.simplefilter("ignore", UserWarning)
        on_ember = run(EMBER)
        cpu_math = _under_math(lambda: run("cpu"))
        if transform in ("jvp", "hessian"):
            with pytest.raises(NotImplementedError, match="forward AD with _scaled_dot_product_flash"):
                run("cpu")
        else:
            torch.testing.assert_close(on_ember.cpu(), run("cpu"))
    assert on_ember.device.type == EMBER
    torch.testing.assert_close(on_ember.cpu(), cpu_math)
