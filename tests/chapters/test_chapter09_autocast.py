"""Chapter 09's claims, checked on the backend the chapter ends with (and on its earlier versions).

Chapter 09 builds on chapter 08, which registers the backend name "privateuseone"; that cannot be undone
in this process, so the facts are computed in one child process that loads chapter 09's last build (or
a build without some of its parts) and prints them as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from book.paths import CSRC, REPO
from book.run import sync
from book.run.chapter import Chapter

CHILD = textwrap.dedent(
    """
    import json
    import warnings

    import book  # before torch: it turns PyTorch's backend autoload off
    import torch
    from book.run.chapter import Chapter

    E = "privateuseone"
    Chapter.of("autocast").build({})
    facts = {}

    def outcome(call):
        try:
            return str(call().dtype)
        except Exception as error:  # noqa: BLE001 (the message is the fact)
            return f"{type(error).__name__}: {error}"

    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(8, 4, generator=g), torch.randn(4, 3, generator=g)
    ae, be = a.to(E), b.to(E)
    with torch.autocast(device_type=E):
        facts["mm"] = outcome(lambda: ae @ be)
        facts["mm_value"] = torch.equal((ae @ be).cpu(), (a.half().float() @ b.half().float()).half())
        facts["mul"] = outcome(lambda: ae * 2)
        facts["linear"] = outcome(lambda: torch.nn.functional.linear(ae, be.t()))
        facts["addmm"] = outcome(lambda: torch.addmm(torch.zeros(3).to(E), ae, be))
        facts["bmm"] = outcome(lambda: torch.bmm(ae[None], be[None]))
        facts["softmax"] = outcome(lambda: (ae @ be).softmax(-1))
        facts["log_softmax"] = outcome(lambda: (ae @ be).log_softmax(-1))
        facts["addcmul_mixed"] = outcome(lambda: torch.addcmul(ae @ be, torch.ones(3).to(E), torch.ones(3).to(E)))
        facts["custom_abs"] = outcome(lambda: torch.ops.ember.custom_abs(ae @ be))
        facts["double_mm"] = outcome(lambda: ae.double() @ be.double())
    with torch.autocast(device_type=E, dtype=torch.bfloat16):
        facts["bf16_mm"] = outcome(lambda: ae @ be)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autocast(device_type=E, dtype=torch.float64):
            facts["float64_enabled"] = torch.is_autocast_enabled(E)
    facts["float64_warnings"] = [str(w.message) for w in caught]
    facts["default_dtype"] = str(torch.get_autocast_dtype(E))

    # backward in the forward's dtype
    w = torch.randn(4, 3).to(E).requires_grad_()
    with torch.autocast(device_type=E):
        out = ae @ w
    seen = []
    out.register_hook(lambda grad: seen.append(str(grad.dtype)))
    out.float().sum().backward()
    facts["grad_at_mm"], facts["w_grad"] = seen[0], str(w.grad.dtype)

    # convolution under autocast: float16 forward and backward, float32 parameter gradients
    torch.manual_seed(7)
    conv = torch.nn.Conv2d(3, 4, kernel_size=3, padding=1)
    images = torch.randn(2, 3, 8, 8, generator=g)
    runs = {}
    for device, enabled in (("cpu", False), (E, True)):
        model = torch.nn.Conv2d(3, 4, kernel_size=3, padding=1).to(device)
        model.load_state_dict(conv.state_dict())
        with torch.autocast(device_type=device, enabled=enabled):
            out = model(images.to(device))
        out.float().sum().backward()
        runs[device] = [out, model.weight.grad, model.bias.grad]
    facts["conv_dtypes"] = [str(t.dtype) for t in runs[E]]
    facts["conv_errors"] = [
        ((mine.cpu().float() - ref).abs().max() / ref.abs().max()).item() for mine, ref in zip(runs[E], runs["cpu"])
    ]
    with torch.autocast(device_type=E):
        facts["conv1d"] = outcome(lambda: torch.nn.functional.conv1d(ae.t()[None], be.t()[:, :, None]))
        facts["conv_double"] = outcome(lambda: torch.nn.functional.conv2d(images.double().to(E), conv.weight.double().to(E)))
    with torch.autocast(device_type=E, dtype=torch.bfloat16):
        facts["conv_bf16"] = outcome(lambda: torch.nn.functional.conv2d(images.to(E), conv.weight.to(E)))
    facts["conv_registrations"] = {
        op: next(line for line in torch._C._dispatch_dump(op).splitlines() if line.startswith("PrivateUse1:"))
        for op in ("aten::convolution", "aten::convolution_backward", "aten::convolution_overrideable")
    }

    # GradScaler kernels against the CPU's
    def amp(device):
        grads = [torch.tensor([1.0, 2.0, float("inf")]), torch.tensor([[4.0, 8.0]], dtype=torch.float64).t()]
        grads = [t.clone().to(device) for t in grads]
        found, inv = torch.zeros(1).to(device), torch.full((1,), 0.5).to(device)
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
        results = [t.cpu().flatten().tolist() for t in grads] + [found.item()]
        for found_inf in (0.0, 1.0):
            scale, tracker = torch.full((1,), 8.0).to(device), torch.full((1,), 2, dtype=torch.int32).to(device)
            torch._amp_update_scale_(scale, tracker, torch.full((1,), found_inf).to(device), 2.0, 0.5, 3)
            results.append([scale.item(), tracker.item()])
        return results
    facts["amp_cpu"], facts["amp_ember"] = amp("cpu"), amp(E)
    facts["unscale_bad_scale"] = outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(2).to(E)], torch.zeros(1).to(E), torch.ones(2).to(E)))
    facts["unscale_other_device"] = outcome(lambda: torch._amp_foreach_non_finite_check_and_unscale_(
        [torch.ones(2).to(E + ":1")], torch.zeros(1).to(E), torch.ones(1).to(E)))

    # a scaled float16 step skips its update after an overflow
    torch.manual_seed(7)
    model = torch.nn.Linear(4, 1, bias=False).to(E)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(E, init_scale=1024.0)
    inputs, targets = torch.randn(8, 4).to(E), torch.randn(8, 1).to(E)
    steps = []
    for x in (inputs, inputs.clone().index_fill_(0, torch.tensor([0]).to(E), 1e5), inputs):
        optimizer.zero_grad()
        with torch.autocast(device_type=E):
            loss = (model(x).float() - targets).pow(2).mean()
        before = model.weight.detach().clone()
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        steps.append([not torch.equal(before, model.weight.detach()), scaler.get_scale()])
    facts["steps"] = steps

    # mse_loss warns nothing and equals the CPU's (chapter 03's fallback runs the functional kernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        x, y = torch.randn(8, 3, generator=g), torch.randn(8, 3, generator=g)
        losses = {}
        for name in ("mse_loss", "smooth_l1_loss"):
            loss = getattr(torch.nn.functional, name)
            for reduction in ("mean", "sum", "none"):
                losses[f"{name} {reduction}"] = torch.equal(
                    loss(x.to(E), y.to(E), reduction=reduction).cpu(), loss(x, y, reduction=reduction)
                )
        with torch.autocast(device_type=E):
            h = ae @ be
            losses["autocast mse_loss"] = str(torch.nn.functional.mse_loss(h, torch.zeros_like(h)).dtype)
    facts["losses"] = losses
    facts["loss_warnings"] = [str(w.message) for w in caught]

    # attention: ember's choice, its kernel, the math path and the CPU
    from torch.nn.attention import SDPBackend, sdpa_kernel

    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (torch.randn(2, 3, 5, 4, generator=g) for _ in range(3))
    qe, ke, ve = q.to(E), k.to(E), v.to(E)
    facts["sdpa_choice"] = torch._fused_sdp_choice(qe, ke, ve)
    with sdpa_kernel(SDPBackend.MATH):
        facts["sdpa_choice_math"] = torch._fused_sdp_choice(qe, ke, ve)
    facts["sdpa_choice_3d"] = torch._fused_sdp_choice(qe[0], ke[0], ve[0])

    def attend(device, math=False, autocast=False):
        leaves = [t.to(device, copy=True).requires_grad_() for t in (q, k, v)]
        fused = [SDPBackend.OVERRIDEABLE, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
        with sdpa_kernel([SDPBackend.MATH] if math else fused), torch.autocast(E, enabled=autocast):
            out = sdpa(*leaves, is_causal=True)
        out.float().pow(2).sum().backward()
        return [out.grad_fn.name(), str(out.dtype)], [out.detach().cpu()] + [t.grad.cpu() for t in leaves]

    def error(results, reference):
        return max(((r.float() - e).abs().max() / e.abs().max()).item() for r, e in zip(results, reference))

    _, cpu = attend("cpu")
    for autocast in (False, True):
        (name, dtype), kernel = attend(E, autocast=autocast)
        (math_name, _), math = attend(E, math=True, autocast=autocast)
        facts[f"sdpa autocast={autocast}"] = {
            "grad_fn": name, "dtype": dtype, "math_grad_fn": math_name,
            "vs_math": error(kernel, math), "vs_cpu": error(kernel, cpu),
        }
    calls = []

    def visit(items, depth):
        for call in items:
            calls.append((depth, call.name, call.kernel))
            visit(call.calls, depth + 1)

    visit(book.trace(lambda: sdpa(qe, ke, ve)).calls, 0)
    facts["sdpa_trace"] = [[name, kernel] for depth, name, kernel in calls if depth <= 1]
    print("FACTS" + json.dumps(facts))
    """
)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", EMBER_BOOK_BATCH="1")
    result = subprocess.run(
        [sys.executable, "-c", CHILD], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    line = next((line for line in result.stdout.splitlines() if line.startswith("FACTS")), None)
    assert line is not None, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(line[len("FACTS") :])


def test_the_chapter_shows_every_autocast_and_amp_region() -> None:
    names = {part.name for part in Chapter.of("autocast").parts()}
    files = {"amp/EmberAutocast.cpp", "amp/EmberAmp.cpp", "aten/EmberAttention.cpp"}
    regions = {
        name
        for name, region in sync.extension_regions().items()
        if region.path.relative_to(CSRC).as_posix() in files
    }
    assert regions <= names
    assert {"autocast_fallthrough", "autocast_mm", "autocast_lists", "autocast_custom_abs"} <= regions
    assert {"amp_matmul", "amp_convolution", "amp_unscale", "amp_update_scale"} <= regions
    assert {"sdpa_choice", "sdpa_overrideable"} <= regions


def test_lower_precision_ops_run_in_float16(facts: dict[str, Any]) -> None:
    for op in ("mm", "linear", "addmm", "bmm"):
        assert facts[op] == "torch.float16", op
    assert facts["mm_value"] is True


def test_convolution_runs_in_float16_with_float32_parameter_gradients(facts: dict[str, Any]) -> None:
    assert facts["conv_dtypes"] == ["torch.float16", "torch.float32", "torch.float32"]
    assert all(error < 1e-3 for error in facts["conv_errors"]), facts["conv_errors"]
    assert facts["conv1d"] == "torch.float16"
    assert facts["conv_bf16"] == "torch.bfloat16"
    assert facts["conv_double"] == "torch.float64"


def test_convolution_part_sits_above_chapter_06s_kernels(facts: dict[str, Any]) -> None:
    registered = facts["conv_registrations"]
    for op in ("aten::convolution", "aten::convolution_backward"):
        assert "09_autocast.ipynb[amp_convolution]" in registered[op], registered[op]
    # chapter 6's kernel is still the one registered, not replaced
    assert "06_convolution.ipynb[convolution]" in registered["aten::convolution_overrideable"]


def test_fp32_and_promote_policies(facts: dict[str, Any]) -> None:
    assert facts["softmax"] == facts["log_softmax"] == "torch.float32"
    assert facts["addcmul_mixed"] == "torch.float32"
    assert facts["custom_abs"] == "torch.float32"


def test_other_ops_fall_through_and_double_is_not_cast(facts: dict[str, Any]) -> None:
    assert facts["mul"] == "torch.float32"
    assert facts["double_mm"] == "torch.float64"


def test_dtypes_autocast_accepts(facts: dict[str, Any]) -> None:
    assert facts["default_dtype"] == "torch.float16"
    assert facts["bf16_mm"] == "torch.bfloat16"
    assert facts["float64_enabled"] is False
    assert any(
        "In privateuseone autocast, but the target dtype is not supported" in w
        for w in facts["float64_warnings"]
    )


def test_backward_runs_in_the_forwards_dtype(facts: dict[str, Any]) -> None:
    assert facts["grad_at_mm"] == "torch.float16"
    assert facts["w_grad"] == "torch.float32"


def test_grad_scaler_kernels_match_the_cpu(facts: dict[str, Any]) -> None:
    assert facts["amp_ember"] == facts["amp_cpu"]
    assert facts["amp_cpu"][2] == 1.0  # found_inf
    assert facts["amp_cpu"][3] == [16.0, 0] and facts["amp_cpu"][4] == [4.0, 0]


def test_grad_scaler_kernels_refuse_bad_input_by_name(facts: dict[str, Any]) -> None:
    assert "inv_scale must be a one-element Float tensor" in facts["unscale_bad_scale"]
    assert "every gradient must be on privateuseone:0" in facts["unscale_other_device"]
    assert "privateuseone:1" in facts["unscale_other_device"]


def test_a_float16_step_is_skipped_after_an_overflow(facts: dict[str, Any]) -> None:
    assert facts["steps"] == [[True, 1024.0], [False, 512.0], [True, 512.0]]


def test_mse_loss_warns_nothing_and_equals_the_cpus(facts: dict[str, Any]) -> None:
    assert facts["loss_warnings"] == []
    assert facts["losses"].pop("autocast mse_loss") == "torch.float32"
    assert all(facts["losses"].values()), facts["losses"]


def test_attention_chooses_ember_kernel_and_respects_the_callers_choice(facts: dict[str, Any]) -> None:
    overrideable, math = 4, 0  # at::SDPBackend (ATen/SDPBackend.h)
    assert facts["sdpa_choice"] == overrideable
    assert facts["sdpa_choice_math"] == math
    assert facts["sdpa_choice_3d"] == math
    assert facts["sdpa_trace"] == [
        ["aten::scaled_dot_product_attention", "CompositeImplicitAutograd"],
        ["aten::_scaled_dot_product_fused_attention_overrideable", "ember kernel"],
    ]


@pytest.mark.parametrize(
    ("autocast", "dtype", "tolerance"), [(False, "torch.float32", 1e-5), (True, "torch.float16", 1e-2)]
)
def test_attention_equals_the_math_path_and_the_cpu(
    facts: dict[str, Any], autocast: bool, dtype: str, tolerance: float
) -> None:
    run = facts[f"sdpa autocast={autocast}"]
    assert run["grad_fn"] == "ScaledDotProductFusedAttentionOverrideableBackward0"
    assert run["math_grad_fn"] != run["grad_fn"]
    assert run["dtype"] == dtype
    assert run["vs_math"] <= tolerance and run["vs_cpu"] <= tolerance, run
