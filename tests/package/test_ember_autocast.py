"""Autocast and GradScaler on the installed torch_ember (chapter 09): the device module's AMP API, the
AutocastPrivateUse1 wrappers and their policies, float16 and bfloat16 matrix products and convolutions,
backward in the forward's dtype, GradScaler's device kernels, and clear errors and warnings for bad input."""

from __future__ import annotations

import re
import warnings

import pytest
import torch

EMBER = "ember"


def sample(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(7)
    return torch.randn(shape, generator=generator, dtype=dtype)


def test_device_module_amp_api() -> None:
    assert torch.ember.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.ember.is_bf16_supported() is True
    assert torch.get_autocast_dtype(EMBER) == torch.float16
    assert torch.amp.is_autocast_available(EMBER)


def test_autocast_has_a_fallthrough_and_wrappers_on_ember() -> None:
    assert torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastPrivateUse1)
    for op in (
        "aten::mm",
        "aten::addmm",
        "aten::matmul",
        "aten::linear",
        "aten::softmax.int",
        "ember::custom_abs",
        "aten::conv1d",
        "aten::conv2d",
        "aten::convolution",
        "aten::_convolution",
    ):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "AutocastPrivateUse1"), op
    # DispatchKey::Autocast is CUDA's: nothing of ember's may land there.
    assert not torch._C._dispatch_has_kernel_for_dispatch_key("ember::custom_abs", "AutocastCUDA")


@pytest.mark.parametrize(
    ("name", "call", "dtype"),
    [
        ("mm", lambda a, b: a @ b, torch.float16),
        ("addmm", lambda a, b: torch.addmm(torch.zeros(3, device=EMBER), a, b), torch.float16),
        ("bmm", lambda a, b: torch.bmm(a[None], b[None]), torch.float16),
        ("linear", lambda a, b: torch.nn.functional.linear(a, b.t()), torch.float16),
        (
            "conv2d",
            lambda a, b: torch.nn.functional.conv2d(a[None, None], b[None, None, :2, :2]),
            torch.float16,
        ),
        ("conv1d", lambda a, b: torch.nn.functional.conv1d(a.t()[None], b.t()[:, :, None]), torch.float16),
        ("softmax", lambda a, b: (a @ b).softmax(-1), torch.float32),
        ("log_softmax", lambda a, b: (a @ b).log_softmax(-1), torch.float32),
        (
            "mse_loss",
            lambda a, b: torch.nn.functional.mse_loss(a @ b, torch.zeros(8, 3, device=EMBER)),
            torch.float32,
        ),
        ("exp", lambda a, b: (a @ b).exp(), torch.float32),
        (
            "addcmul mixed",
            lambda a, b: torch.addcmul(a @ b, torch.ones(3, device=EMBER), torch.ones(3, device=EMBER)),
            torch.float32,
        ),
        ("custom_abs", lambda a, b: torch.ops.ember.custom_abs(a @ b), torch.float32),
        ("mul falls through", lambda a, b: a * 2, torch.float32),
    ],
    ids=lambda value: value.replace(" ", "-") if isinstance(value, str) else "",
)
def test_policies(name: str, call, dtype: torch.dtype) -> None:
    a, b = sample(8, 4).to(EMBER), sample(4, 3).to(EMBER)
    with torch.autocast(device_type=EMBER):
        result = call(a, b)
    assert result.dtype == dtype, name
    assert result.is_ember


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_lower_precision_products_equal_the_cpu(dtype: torch.dtype) -> None:
    a, b = sample(16, 9), sample(9, 5)
    expected = (a.to(dtype).float() @ b.to(dtype).float()).to(dtype)
    with torch.autocast(device_type=EMBER, dtype=dtype):
        result = a.to(EMBER) @ b.to(EMBER)
    assert result.dtype == dtype
    assert torch.equal(result.cpu(), expected)


def test_float64_inputs_are_not_cast() -> None:
    a = sample(4, 4, dtype=torch.float64).to(EMBER)
    with torch.autocast(device_type=EMBER):
        assert (a @ a).dtype == torch.float64


def test_cpu_tensors_are_left_to_the_cpu() -> None:
    a = sample(4, 4)
    with torch.autocast(device_type=EMBER):
        assert (a @ a).dtype == torch.float32


def test_unsupported_dtype_warns_naming_the_device_and_disables_autocast() -> None:
    a = sample(4, 4).to(EMBER)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device_type=EMBER, dtype=torch.float64):
            assert not torch.is_autocast_enabled(EMBER)
            assert (a @ a).dtype == torch.float32
    messages = [str(w.message) for w in caught]
    assert any(
        "In ember autocast, but the target dtype is not supported" in m
        and "torch.float16, torch.bfloat16" in m
        for m in messages
    ), messages


def test_backward_runs_in_the_forwards_dtype() -> None:
    w = sample(4, 3).to(EMBER).requires_grad_()
    x = sample(8, 4).to(EMBER)
    with torch.autocast(device_type=EMBER):
        out = x @ w
    seen: list[torch.dtype] = []
    out.register_hook(lambda grad: seen.append(grad.dtype))
    out.float().sum().backward()
    assert seen == [torch.float16]
    assert w.grad is not None and w.grad.dtype == torch.float32
    expected = (x.cpu().half().float().t() @ torch.ones(8, 3)).half().float()
    assert torch.equal(w.grad.cpu(), expected)


TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


def conv_runs(dtype: torch.dtype) -> dict[str, dict[str, torch.Tensor]]:
    """A strided, grouped Conv2d with bias: float32 on the CPU, and under autocast on ember."""
    conv = torch.nn.Conv2d(4, 6, kernel_size=3, stride=2, padding=1, groups=2)
    with torch.no_grad():
        conv.weight.copy_(sample(6, 2, 3, 3))
        conv.bias.copy_(sample(6))
    images = sample(3, 4, 9, 7)
    runs: dict[str, dict[str, torch.Tensor]] = {}
    for device, enabled in (("cpu", False), (EMBER, True)):
        model = torch.nn.Conv2d(4, 6, kernel_size=3, stride=2, padding=1, groups=2).to(device)
        model.load_state_dict(conv.state_dict())
        with torch.autocast(device_type=device, dtype=dtype, enabled=enabled):
            out = model(images.to(device))
        seen: list[torch.Tensor] = []
        out.register_hook(seen.append)
        (out.float() * sample(*out.shape).to(device)).sum().backward()
        assert model.weight.grad is not None and model.bias.grad is not None
        runs[device] = {
            "output": out,
            "grad_at_conv": seen[0],
            "weight": model.weight.grad,
            "bias": model.bias.grad,
        }
    return runs


def close(value: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> bool:
    """Within the dtype's rounding of the largest element (the float32 sums differ in order only)."""
    error = (value.cpu().float() - reference).abs().max()
    return bool(error <= 2 * TOLERANCE[dtype] * reference.abs().max())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_convolution_under_autocast_matches_float32_on_the_cpu(dtype: torch.dtype) -> None:
    runs = conv_runs(dtype)
    ember, cpu = runs[EMBER], runs["cpu"]
    assert ember["output"].dtype == dtype and ember["output"].is_ember
    assert close(ember["output"], cpu["output"], dtype)
    # backward runs in the forward's dtype; the parameters get float32 gradients
    assert ember["grad_at_conv"].dtype == dtype
    for name in ("weight", "bias"):
        assert ember[name].dtype == torch.float32, name
        assert close(ember[name], cpu[name], dtype), name


def test_lower_precision_convolution_rounds_a_float32_result() -> None:
    x, w, b = sample(2, 3, 6, 6, dtype=torch.float16), sample(4, 3, 3, 3, dtype=torch.float16), sample(4)
    result = torch.nn.functional.conv2d(x.to(EMBER), w.to(EMBER), b.half().to(EMBER))
    expected = torch.nn.functional.conv2d(x.float(), w.float(), b.half().float()).half()
    assert result.dtype == torch.float16
    # one rounding of a float32 sum: at most one float16 step away from the CPU's
    assert torch.allclose(result.cpu().float(), expected.float(), rtol=1e-3, atol=1e-3)
    grads = torch.ops.aten.convolution_backward(
        torch.ones_like(result),
        x.to(EMBER),
        w.to(EMBER),
        [4],
        [1, 1],
        [0, 0],
        [1, 1],
        False,
        [0, 0],
        1,
        [True, True, True],
    )
    assert [g.dtype for g in grads] == [torch.float16] * 3
    assert torch.equal(grads[2].cpu(), torch.full((4,), 32.0, dtype=torch.float16))


def test_float64_convolution_is_not_cast() -> None:
    x, w = sample(1, 1, 5, 5, dtype=torch.float64), sample(1, 1, 2, 2, dtype=torch.float64)
    with torch.autocast(device_type=EMBER):
        result = torch.nn.functional.conv2d(x.to(EMBER), w.to(EMBER))
    assert result.dtype == torch.float64
    assert torch.allclose(result.cpu(), torch.nn.functional.conv2d(x, w))


@pytest.mark.parametrize(
    ("call", "autocast", "pattern"),
    [
        (  # outside autocast (under it, both would be cast to float16)
            lambda: torch.nn.functional.conv2d(
                sample(1, 1, 4, 4).half().to(EMBER), sample(1, 1, 2, 2).to(EMBER)
            ),
            False,
            # chapter 14: the host's convolution refuses the mix, ember adds the operator and device.
            # The host's words depend on its CPU: oneDNN's check where the CPU has AVX512-FP16, its
            # own kernel's elsewhere.
            r"(?s)(expected scalar type Half but found Float|Input type \(torch\.HalfTensor\) and "
            r"weight type \(torch\.FloatTensor\) should be the same).*"
            r"ember: in aten::convolution on ember:0",
        ),
    ],
    ids=["mixed-dtypes"],
)
def test_convolutions_ember_cannot_run_fail_by_name(call, autocast: bool, pattern: str) -> None:
    with torch.autocast(device_type=EMBER, enabled=autocast), pytest.raises(RuntimeError, match=pattern):
        call()


def amp_kernels(device: str) -> list[object]:
    grads = [torch.tensor([1.0, 2.0, float("inf")]), torch.tensor([[4.0, 8.0]], dtype=torch.float64).t()]
    grads = [g.clone().to(device) for g in grads]
    found, inv = torch.zeros(1, device=device), torch.full((1,), 0.5, device=device)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    results: list[object] = [g.cpu().flatten().tolist() for g in grads] + [found.item()]
    for found_inf, tracker_start in ((0.0, 2), (0.0, 0), (1.0, 2)):
        scale = torch.full((1,), 8.0, device=device)
        tracker = torch.full((1,), tracker_start, dtype=torch.int32, device=device)
        torch._amp_update_scale_(scale, tracker, torch.full((1,), found_inf, device=device), 2.0, 0.5, 3)
        results.append([scale.item(), tracker.item()])
    return results


def test_grad_scaler_kernels_match_the_cpu() -> None:
    assert amp_kernels(EMBER) == amp_kernels("cpu")


def test_unscale_finite_gradients_leaves_found_inf_alone() -> None:
    grads = [torch.ones(5, device=EMBER), torch.ones(2, 2, dtype=torch.float16, device=EMBER)]
    found = torch.zeros(1, device=EMBER)
    torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.full((1,), 0.25, device=EMBER))
    assert found.item() == 0.0
    assert grads[0].cpu().tolist() == [0.25] * 5
    assert grads[1].dtype == torch.float16 and grads[1].cpu().float().flatten().tolist() == [0.25] * 4


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        (
            lambda: (
                [torch.ones(2, device=EMBER)],
                torch.zeros(1, device=EMBER),
                torch.ones(2, device=EMBER),
            ),
            "inv_scale must be a one-element Float tensor",
        ),
        (
            lambda: (
                [torch.ones(2, device="ember:1")],
                torch.zeros(1, device=EMBER),
                torch.ones(1, device=EMBER),
            ),
            "every gradient must be on ember:0 (found_inf's device), got one on ember:1",
        ),
        (
            lambda: ([torch.ones(2, device=EMBER)], torch.zeros(1, device=EMBER), torch.ones(1)),
            "inv_scale must be on ember:0, got cpu",
        ),
    ],
    ids=["scale shape", "gradient on another device", "scale on the cpu"],
)
def test_unscale_refuses_bad_input_by_name(make, pattern: str) -> None:
    grads, found, inv = make()
    with pytest.raises(RuntimeError, match=re.escape(pattern)):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)


def test_update_scale_refuses_a_wrong_tracker() -> None:
    scale = torch.ones(1, device=EMBER)
    with pytest.raises(RuntimeError, match=re.escape("growth_tracker must be a one-element Int tensor")):
        torch._amp_update_scale_(
            scale, torch.zeros(1, device=EMBER), torch.zeros(1, device=EMBER), 2.0, 0.5, 3
        )


def test_a_float16_training_step_skips_its_update_on_inf() -> None:
    torch.manual_seed(7)
    model = torch.nn.Linear(4, 1, bias=False).to(EMBER)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(EMBER, init_scale=1024.0)
    inputs, targets = sample(8, 4).to(EMBER), sample(8, 1).to(EMBER)
    overflowing = inputs.cpu()
    overflowing[0, 0] = 1e5
    steps = []
    for x in (inputs, overflowing.to(EMBER), inputs):
        optimizer.zero_grad()
        with torch.autocast(device_type=EMBER):
            loss = (model(x).float() - targets).pow(2).mean()
        before = model.weight.detach().clone()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        steps.append((not torch.equal(before, model.weight.detach()), scaler.get_scale()))
    assert steps == [(True, 1024.0), (False, 512.0), (True, 512.0)]


def test_a_float16_convolution_step_skips_its_update_on_inf() -> None:
    torch.manual_seed(7)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(2, 3, kernel_size=3, padding=1),
        torch.nn.Flatten(),
        torch.nn.Linear(48, 1, bias=False),
    ).to(EMBER)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler(EMBER, init_scale=1024.0)
    inputs, targets = sample(4, 2, 4, 4).to(EMBER), sample(4, 1).to(EMBER)
    overflowing = inputs.cpu()
    overflowing[0, 0, 0, 0] = 1e5
    steps = []
    for x in (inputs, overflowing.to(EMBER), inputs):
        optimizer.zero_grad()
        with torch.autocast(device_type=EMBER):
            loss = torch.nn.functional.mse_loss(model(x), targets)
        before = model[0].weight.detach().clone()
        scaler.scale(loss).backward()
        assert model[0].weight.grad is not None and model[0].weight.grad.dtype == torch.float32
        scaler.step(optimizer)
        scaler.update()
        steps.append((not torch.equal(before, model[0].weight.detach()), scaler.get_scale()))
    assert steps == [(True, 1024.0), (False, 512.0), (True, 512.0)]
