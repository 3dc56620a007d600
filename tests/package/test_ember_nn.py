"""Chapter 14's kernels: the training steps of a small MLP and CNN run natively on ember.

Batch norm, max pooling, (log_)softmax and nll_loss, forward and backward, are ember kernels whose
arithmetic is ATen's CPU code run inside a launch on the device's memory, so their results equal the
CPU's exactly. The shared benchmark models (notes ISSUE8) must make zero CPU-fallback calls per step:
the fallback copies every argument to the CPU, which `aten::_to_cpu` events in a profile reveal.
"""

from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile
from torch_ember.bench import cnn, mlp  # the benchmark's models: the steps it times

EMBER = torch.device("ember", 0)
LOW_PRECISION = [torch.float16, torch.bfloat16]


def training_step(kind: str, device: torch.device | str) -> tuple[nn.Module, Callable[[], float]]:
    """The benchmark's step: forward, cross_entropy, backward, SGD with momentum, zero_grad."""
    torch.manual_seed(0)
    model = mlp() if kind == "mlp" else cnn()
    generator = torch.Generator().manual_seed(1)
    x = torch.randn((64, 256) if kind == "mlp" else (32, 3, 32, 32), generator=generator)
    y = torch.randint(0, 10, (x.shape[0],), generator=generator)
    model, x, y = model.to(device), x.to(device), y.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> float:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return model, step


def fallback_calls(step: Callable[[], object]) -> Counter[str]:
    """The operators that went through the CPU fallback during one call of step."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    calls: Counter[str] = Counter()
    for event in prof.events():
        if event.name == "aten::_to_cpu":
            parent = event.cpu_parent
            calls[parent.name if parent is not None else "?"] += 1
    return calls


def test_the_probe_sees_the_fallback() -> None:
    # The counter can fail: an operator ember leaves to the fallback is counted.
    x = torch.randn(4, 4, device=EMBER)
    assert fallback_calls(lambda: torch.linalg.matrix_norm(x, ord="nuc"))


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_steps_make_no_fallback_calls(kind: str) -> None:
    _, step = training_step(kind, EMBER)
    step()  # the first step creates the momentum buffers
    assert fallback_calls(step) == Counter()


@pytest.mark.parametrize("kind", ["mlp", "cnn"])
def test_training_steps_follow_the_cpu(kind: str) -> None:
    # Dropout draws from ember's generator, so the CNN runs in eval mode here (batch norm then
    # uses its running statistics, which the first training step's forward already moved).
    ember_model, ember_step = training_step(kind, EMBER)
    cpu_model, cpu_step = training_step(kind, "cpu")
    if kind == "cnn":
        ember_model[9].p = cpu_model[9].p = 0.0
    losses = [(ember_step(), cpu_step()) for _ in range(3)]
    for ember_loss, cpu_loss in losses:
        assert ember_loss == pytest.approx(cpu_loss, rel=1e-4)
    for (name, p), q in zip(ember_model.state_dict().items(), cpu_model.state_dict().values(), strict=True):
        torch.testing.assert_close(p.cpu(), q, rtol=1e-4, atol=1e-5, msg=name)


def both(fn: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]], *inputs: torch.Tensor) -> None:
    """fn on ember and on the CPU: equal values, and equal gradients of every input that needs one."""
    cpu = [t.detach().clone().requires_grad_(t.requires_grad) for t in inputs]
    dev = [t.detach().to(EMBER).requires_grad_(t.requires_grad) for t in inputs]
    cpu_out, dev_out = fn(*cpu), fn(*dev)
    cpu_out = cpu_out if isinstance(cpu_out, tuple) else (cpu_out,)
    dev_out = dev_out if isinstance(dev_out, tuple) else (dev_out,)
    for c, d in zip(cpu_out, dev_out, strict=True):
        assert d.device == EMBER
        torch.testing.assert_close(d.cpu(), c, rtol=0, atol=0)
    if cpu_out[0].requires_grad:
        grad = torch.randn(cpu_out[0].shape, generator=torch.Generator().manual_seed(5)).to(cpu_out[0].dtype)
        cpu_out[0].backward(grad)
        dev_out[0].backward(grad.to(EMBER))
        for c, d in zip(cpu, dev, strict=True):
            if c.requires_grad:
                torch.testing.assert_close(d.grad.cpu(), c.grad, rtol=0, atol=0)


def randn(*shape: int, dtype: torch.dtype = torch.float32, grad: bool = True) -> torch.Tensor:
    t = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).to(dtype)
    return t.requires_grad_(grad)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *LOW_PRECISION])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_equals_cpu(dtype: torch.dtype, training: bool) -> None:
    x = randn(4, 3, 5, 6, dtype=dtype)
    weight, bias = randn(3, dtype=dtype), randn(3, dtype=dtype)
    mean, var = torch.zeros(3, dtype=dtype), torch.ones(3, dtype=dtype)
    running: dict[str, torch.Tensor] = {}

    def norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        # Copies: the CPU call must not move the statistics the ember call starts from.
        m, v = mean.clone().to(x.device), var.clone().to(x.device)
        out = F.batch_norm(x, m, v, w, b, training=training, momentum=0.3, eps=1e-3)
        running[x.device.type] = torch.stack([m, v]).cpu()
        return out

    both(norm, x, weight, bias)
    torch.testing.assert_close(running["ember"], running["cpu"], rtol=0, atol=0)


def test_batch_norm_in_float16_with_float32_statistics() -> None:
    # What autocast gives BatchNorm2d: float16 activations, float32 parameters and statistics.
    x = randn(2, 4, 3, 3, dtype=torch.float16)
    w, b = randn(4), randn(4)
    both(
        lambda x, w, b: F.batch_norm(
            x, torch.zeros(4, device=x.device), torch.ones(4, device=x.device), w, b, training=True
        ),
        x,
        w,
        b,
    )


@pytest.mark.parametrize("dtype", [torch.float32, *LOW_PRECISION])
@pytest.mark.parametrize(
    "args",
    [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(3, 2), ceil_mode=True)],
    ids=["2", "3s2p1", "3x2ceil"],
)
def test_max_pool2d_equals_cpu(dtype: torch.dtype, args: dict) -> None:
    both(lambda x: F.max_pool2d(x, **args), randn(2, 3, 9, 7, dtype=dtype))
    both(lambda x: F.max_pool2d(x, **args), randn(3, 8, 8, dtype=dtype))  # no batch dimension
    both(lambda x: F.max_pool2d(x, return_indices=True, **args), randn(2, 3, 9, 7, dtype=dtype, grad=False))


def test_max_pool2d_channels_last() -> None:
    x = randn(2, 3, 8, 8, grad=False).to(memory_format=torch.channels_last).requires_grad_()
    both(lambda x: F.max_pool2d(x, 2), x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, *LOW_PRECISION])
def test_softmax_and_log_softmax_equal_cpu(dtype: torch.dtype) -> None:
    both(lambda x: F.log_softmax(x, dim=1), randn(7, 11, dtype=dtype))
    both(lambda x: F.softmax(x, dim=0), randn(7, 11, dtype=dtype))
    both(lambda x: F.log_softmax(x.t(), dim=-1), randn(5, 6, dtype=dtype))  # non-contiguous


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, *LOW_PRECISION])
def test_cross_entropy_equals_cpu(reduction: str, dtype: torch.dtype) -> None:
    target = torch.tensor([3, 0, 9, 9, 2, 5])
    weight = torch.rand(10, generator=torch.Generator().manual_seed(2)).to(dtype)
    both(lambda x: F.cross_entropy(x, target.to(x.device), reduction=reduction), randn(6, 10, dtype=dtype))
    both(
        lambda x: F.cross_entropy(
            x, target.to(x.device), weight=weight.to(x.device), ignore_index=9, reduction=reduction
        ),
        randn(6, 10, dtype=dtype),
    )
    both(lambda x: F.nll_loss(x, target[0].to(x.device), reduction=reduction), randn(10, dtype=dtype))


def test_a_target_out_of_range_names_the_device_and_operator() -> None:
    x = torch.randn(3, 5, device=EMBER)
    with pytest.raises(IndexError, match=r"(?s)out of bounds.*ember: in aten::nll_loss_forward on ember:0"):
        F.nll_loss(x, torch.tensor([0, 7, 1], device=EMBER))


def test_bad_inputs_are_refused_before_the_launch() -> None:
    x = torch.randn(2, 3, 4, 4, device=EMBER)
    with pytest.raises(RuntimeError, match=r"ember: aten::max_pool2d_with_indices on ember:0: the window"):
        F.max_pool2d(x, kernel_size=7)
    with pytest.raises(
        RuntimeError,
        match=r"^Expected all tensors to be on the same device, but found at least two devices, "
        r"ember:0 and cpu! \(ember: aten::native_batch_norm runs on ember:0\)",
    ):
        F.batch_norm(x, torch.zeros(3), torch.ones(3), training=False)
    with pytest.raises(
        RuntimeError,
        match=r"^Expected all tensors to be on the same device, but found at least two devices, ember:0 and cpu! "
        r"\(ember: aten::nll_loss_forward expects the target on ember:0, got it on cpu\)",
    ):
        F.nll_loss(torch.randn(3, 5, device=EMBER), torch.tensor([0, 1, 2]))


@pytest.mark.parametrize("dtype", [*LOW_PRECISION, torch.complex64, torch.int32])
def test_elementwise_ops_and_reductions_in_other_dtypes_equal_cpu(dtype: torch.dtype) -> None:
    # float16, bfloat16 (and complex, int32): the CPU's kernels on ember's memory, so equal bits.
    generator = torch.Generator().manual_seed(3)
    if dtype.is_floating_point or dtype.is_complex:
        a, b = (torch.randn(5, 7, generator=generator).to(dtype) for _ in range(2))
    else:
        a, b = (torch.randint(1, 9, (5, 7), generator=generator, dtype=dtype) for _ in range(2))
    ops: list[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = [
        lambda x, y: x + y,
        lambda x, y: x - 2 * y,
        lambda x, y: x * y,
        lambda x, y: x.t() * 3,
        lambda x, y: -x,
        lambda x, y: x.sum(),
        lambda x, y: x.sum(dim=0),
    ]
    if dtype != torch.int32:
        ops += [lambda x, y: x / y, lambda x, y: x.exp(), lambda x, y: x.mean(dim=1, keepdim=True)]
    if not dtype.is_complex:
        ops += [lambda x, y: x < y, lambda x, y: x == 1]
    for op in ops:
        expected = op(a, b)
        actual = op(a.to(EMBER), b.to(EMBER))
        assert actual.device == EMBER and actual.dtype == expected.dtype
        torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


def test_in_place_float16_ops_write_the_device_tensor() -> None:
    x = torch.ones(4, dtype=torch.float16, device=EMBER)
    x.add_(torch.full((4,), 0.5, dtype=torch.float16, device=EMBER)).mul_(2)
    assert x.cpu().tolist() == [3.0] * 4


def test_linear_with_bias_trains_under_autocast() -> None:
    # Chapter 09's demos used bias=False: the bias gradient is a float16 sum, which had no kernel.
    torch.manual_seed(0)
    cpu_model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(EMBER)
    model.load_state_dict(cpu_model.state_dict())
    x, y = torch.randn(32, 8), torch.randint(0, 4, (32,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def step() -> None:
        with torch.autocast("ember", dtype=torch.float16):
            loss = F.cross_entropy(model(x.to(EMBER)), y.to(EMBER))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    step()
    assert model[0].bias.dtype == torch.float32
    assert not torch.equal(model[0].bias.cpu(), cpu_model[0].bias)
    assert fallback_calls(step) == Counter()


def test_bias_gradient_in_bfloat16_equals_cpu() -> None:
    both(
        lambda x, w, b: F.linear(x, w, b),
        randn(6, 5, dtype=torch.bfloat16),
        randn(3, 5, dtype=torch.bfloat16),
        randn(3, dtype=torch.bfloat16),
    )


@pytest.mark.parametrize(
    "call",
    [
        lambda a: a.int() @ a.int().T,
        lambda a: a.to(torch.complex64) @ a.to(torch.complex64).T,
        lambda a: F.conv2d(a.long().view(1, 1, 4, 6), a.long()[:1, :2].reshape(1, 1, 1, 2)),
        lambda a: F.conv_transpose2d(a.view(1, 1, 4, 6), a[:1, :4].reshape(1, 1, 2, 2)),
        lambda a: F.conv3d(a.view(1, 1, 2, 2, 6), a[:1, :2].reshape(1, 1, 1, 1, 2)),
    ],
    ids=["mm_int32", "mm_complex64", "conv_int64", "conv_transposed", "conv3d"],
)
def test_products_chapters_05_06_refused_now_equal_cpu(call: Callable[[torch.Tensor], torch.Tensor]) -> None:
    a = torch.arange(24.0).reshape(4, 6)
    torch.testing.assert_close(call(a.to(EMBER)).cpu(), call(a), rtol=0, atol=0)


def test_conv3d_trains_under_autocast() -> None:
    x = torch.randn(1, 2, 3, 3, 3, device=EMBER)
    conv = nn.Conv3d(2, 4, 2).to(EMBER)
    with torch.autocast("ember"):
        y = conv(x)
    assert y.dtype == torch.float16
    y.float().sum().backward()
    assert conv.weight.grad is not None and conv.weight.grad.dtype == torch.float32


def test_the_host_kernel_refuses_a_cpu_tensor_next_to_ember_tensors() -> None:
    x = torch.randn(1, 2, 5, 5, device=EMBER)
    with pytest.raises(
        RuntimeError,
        match=r"^Expected all tensors to be on the same device, but found at least two devices, ember:0 and cpu! "
        r"\(ember: aten::convolution takes ember tensors and CPU scalars, got a 4-D tensor on cpu\)",
    ):
        torch.ops.aten.convolution_overrideable(
            x, torch.randn(3, 2, 3, 3), None, [1], [0], [1], False, [0], 1
        )


STRIDED_LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "every other column": lambda t: t[..., ::2],
    "transposed strides": lambda t: t.transpose(1, 2).contiguous().transpose(1, 2),
}


@pytest.mark.parametrize("affine", [True, False], ids=["affine", "no-weight"])
@pytest.mark.parametrize("layout", list(STRIDED_LAYOUTS))
def test_batch_norm_of_a_strided_input_equals_cpu(layout: str, affine: bool) -> None:
    """ATen's CPU out= kernel misreads such inputs; the ember kernel must not pass that on."""
    view = STRIDED_LAYOUTS[layout]
    x, weight, bias = torch.randn(2, 6, 8), torch.randn(6), torch.randn(6)
    grad = torch.randn(view(x).shape)
    results = []
    for device in ("cpu", EMBER):
        leaves = [t.to(device).requires_grad_() for t in ([x, weight, bias] if affine else [x])]
        params = leaves[1:] if affine else [None, None]
        y = F.batch_norm(view(leaves[0]), None, None, *params, training=True)
        grads = torch.autograd.grad(y, leaves, grad.to(device))
        results.append([y.cpu(), *(g.cpu() for g in grads)])
    for ember_value, cpu_value in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(ember_value, cpu_value)


def test_layer_norm_of_a_strided_input_equals_cpu() -> None:
    x, weight, bias = torch.randn(2, 3, 8), torch.randn(4), torch.randn(4)
    expected = F.layer_norm(x[..., ::2], (4,), weight, bias)
    got = F.layer_norm(x.to(EMBER)[..., ::2], (4,), weight.to(EMBER), bias.to(EMBER))
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize(
    "product",
    [
        lambda a, b: a.mH @ b,
        lambda a, b: a.conj() @ b,
        lambda a, b: torch.addmm(b, a, b.mH),
        lambda a, b: torch.bmm(a[None].conj(), b[None]),
        lambda a, b: a.conj() + b,
    ],
    ids=["mH-mm", "conj-mm", "addmm-mH", "bmm-conj", "add-conj"],
)
def test_lazily_conjugated_inputs_are_resolved(product: Callable[..., torch.Tensor]) -> None:
    """A conj view's memory holds the plain values: the host kernel must not drop the bit."""
    a, b = torch.randn(3, 3, dtype=torch.complex64), torch.randn(3, 3, dtype=torch.complex64)
    torch.testing.assert_close(product(a.to(EMBER), b.to(EMBER)).cpu(), product(a, b))


# ---- no warning the CPU does not give; low precision computed as the CPU does (issue 14) -------------


def _losses_and_reductions() -> dict[str, Callable[..., torch.Tensor]]:
    cases: dict[str, Callable[..., torch.Tensor]] = {}
    for reduction in ("mean", "sum", "none"):
        r = {"reduction": reduction}
        cases |= {
            f"mse_loss {reduction}": lambda x, y, p, c, r=r: F.mse_loss(x, y, **r),
            f"l1_loss {reduction}": lambda x, y, p, c, r=r: F.l1_loss(x, y, **r),
            f"smooth_l1_loss {reduction}": lambda x, y, p, c, r=r: F.smooth_l1_loss(x, y, **r),
            f"huber_loss {reduction}": lambda x, y, p, c, r=r: F.huber_loss(x, y, **r),
            f"binary_cross_entropy {reduction}": lambda x, y, p, c, r=r: F.binary_cross_entropy(
                x.sigmoid(), p, **r
            ),
            f"bce_with_logits {reduction}": lambda x, y, p, c, r=r: F.binary_cross_entropy_with_logits(
                x, p, **r
            ),
            f"cross_entropy {reduction}": lambda x, y, p, c, r=r: F.cross_entropy(x, c, **r),
            f"kl_div {reduction}": lambda x, y, p, c, r=r: F.kl_div(
                x, p, reduction={"mean": "batchmean"}.get(r["reduction"], r["reduction"])
            ),
            f"soft_margin_loss {reduction}": lambda x, y, p, c, r=r: F.soft_margin_loss(x, y.sign(), **r),
            f"poisson_nll_loss {reduction}": lambda x, y, p, c, r=r: F.poisson_nll_loss(x, p, **r),
            f"multi_margin_loss {reduction}": lambda x, y, p, c, r=r: F.multi_margin_loss(x, c, **r),
        }
    cases |= {
        "sum": lambda x, y, p, c: x.sum(),
        "mean dim": lambda x, y, p, c: x.mean(1, keepdim=True),
        "var": lambda x, y, p, c: x.var(0),
        "norm": lambda x, y, p, c: torch.linalg.vector_norm(x),
        "logsumexp": lambda x, y, p, c: torch.logsumexp(x, 1),
        "layer_norm": lambda x, y, p, c: F.layer_norm(x, (5,)),
    }
    return cases


LOSSES = _losses_and_reductions()


@pytest.mark.parametrize("name", LOSSES)
def test_losses_and_reductions_warn_nothing_and_equal_the_cpu(name: str) -> None:
    """mse_loss and smooth_l1_loss used to warn "An output with one or more elements was resized" (ATen's
    default kernel resized the out= tensor it handed the CPU fallback), forward and backward."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(4, 5, dtype=torch.float64, generator=generator)
    y = torch.randn(4, 5, dtype=torch.float64, generator=generator)
    p = torch.rand(4, 5, dtype=torch.float64, generator=generator)
    c = torch.randint(0, 5, (4,), generator=generator)
    fn = LOSSES[name]
    expected = fn(x.requires_grad_(), y, p, c)
    expected.sum().backward()
    inputs = [t.detach().to(EMBER) for t in (x, y, p, c)]
    inputs[0].requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actual = fn(*inputs)
        actual.sum().backward()
    torch.testing.assert_close(actual.detach().cpu(), expected.detach())
    torch.testing.assert_close(inputs[0].grad.cpu(), x.grad)


NORMS_AND_ADDR: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "layer_norm": lambda x: F.layer_norm(x, (64,), torch.ones(64, dtype=x.dtype, device=x.device) * 1.5),
    "group_norm": lambda x: F.group_norm(x.reshape(8, 16, 4), 4),
    "addr": lambda x: torch.addr(x[0], x[1], x[2], beta=0.5, alpha=2.0),
}


@pytest.mark.parametrize("dtype", LOW_PRECISION)
@pytest.mark.parametrize("name", NORMS_AND_ADDR)
def test_low_precision_norms_and_addr_equal_the_cpu_at_default_tolerances(
    name: str, dtype: torch.dtype
) -> None:
    """They used to run ATen's default kernels, which compose ember's operators and round every step to
    the low-precision dtype; the CPU's kernels accumulate in float. Now they run the CPU's kernels."""
    x = (torch.randn(8, 64, generator=torch.Generator().manual_seed(3)) * 4 + 3).to(dtype)
    fn = NORMS_AND_ADDR[name]
    expected = fn(x)
    actual = fn(x.to(EMBER))
    torch.testing.assert_close(actual.cpu(), expected)  # assert_close's default tolerances for dtype
