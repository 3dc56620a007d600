"""Strides are part of an operator's result (issue 26): ember's kernels return the sizes and strides
FakeTensor predicts for ember, which torch.compile plans with and Inductor's generated code asserts.

- The stride sweep (extension/conformance/strides.py, run in worker processes like the OpInfo sweep):
  no crash, every difference listed with its reason in strides_expected.toml, strict both ways, and the
  committed strides_summary.json current.
- The cases issue 26 measured, each against FakeTensor on ember and against the CPU: attention on a head
  view (forward and backward), convolution and transposed convolution with channels-last operands,
  batch norm's saved statistics in evaluation, replicate and negative padding, pixel_unshuffle and
  dropout's backward on channels-last or non-contiguous inputs.
- The book's own models compiled (book/models.py, loaded by path): a TransformerBlock and a TinyViT,
  forward and backward, equal eager on ember.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map_only

ROOT = Path(__file__).resolve().parents[2]
EXTENSION = ROOT / "extension"
if str(EXTENSION) not in sys.path:
    sys.path.append(str(EXTENSION))  # appended: the installed torch_ember stays the one imported

from conformance import run, strides, strides_report  # noqa: E402

EMBER = torch.device("ember", 0)
aten = torch.ops.aten


def _models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ember_book_models", ROOT / "book" / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


models = _models()


# -- The sweep --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def summary() -> dict[str, Any]:
    data = strides_report.summary_json(
        run.run_sweep(strides_report.default_samples(), chunks=strides.CHUNKS, sweep="strides")
    )
    strides_report.print_summary(data)
    return data


@pytest.fixture(scope="session")
def expected() -> dict[str, str]:
    return strides_report.load_expected()


def test_expected_differences_file_is_well_formed(expected: dict[str, str]) -> None:
    for key, reason in expected.items():
        variant, op = key.split(" ")
        assert variant in (*strides.VARIANTS, strides.MODEL_VARIANT), key
        assert op.startswith("aten."), key
        assert reason in strides_report.REASONS, f"[{reason}] is not one of strides_report.REASONS"


def test_sweep_ran_everything_without_a_crash(summary: dict[str, Any]) -> None:
    assert summary["crashes"] == 0 and not summary["failures"], summary["failures"]
    assert summary["ops"] > 600, "the sweep ran far fewer ops than op_db has"
    assert all(count > 0 for count in summary["by_variant"].values()), summary["by_variant"]
    assert summary["model_cases"] == sorted(strides.MODEL_CASES)


def test_every_difference_is_expected(summary: dict[str, Any], expected: dict[str, str]) -> None:
    new = {k: v for k, v in summary["differences"].items() if k not in expected}
    assert not new, "new differences from FakeTensor (fix the kernel, or list them with a reason in " + (
        strides_report.EXPECTED_FILE.name + "):\n" + "\n".join(f"{k}: {v}" for k, v in sorted(new.items()))
    )


def test_expected_differences_still_differ(summary: dict[str, Any], expected: dict[str, str]) -> None:
    if strides_report.default_samples() != strides.CI_SAMPLES:
        pytest.skip("the list is checked against the CI sample count")
    agreeing = sorted(key for key in expected if key not in summary["differences"])
    assert not agreeing, "listed as differences but agree with FakeTensor now (remove them):\n" + "\n".join(
        agreeing
    )


def test_expected_differences_are_listed_under_their_reason(
    summary: dict[str, Any], expected: dict[str, str]
) -> None:
    misplaced = {
        key: (reason, strides_report.classify(key, summary["differences"][key]))
        for key, reason in expected.items()
        if key in summary["differences"]
        and strides_report.classify(key, summary["differences"][key]) != reason
    }
    assert not misplaced, f"listed under another reason than their detail's (listed, matched): {misplaced}"


def test_checked_in_summary_is_current(summary: dict[str, Any]) -> None:
    if strides_report.default_samples() != strides.CI_SAMPLES:
        pytest.skip("the checked-in summary is the CI sweep's")
    saved = json.loads(strides_report.SUMMARY_FILE.read_text(encoding="utf-8"))
    stale = sorted(f for f in saved.keys() | summary.keys() if saved.get(f) != summary.get(f))
    assert not stale, (
        f"{strides_report.SUMMARY_FILE.name} is stale in {stale}: regenerate it (`make conformance`)"
    )


def test_the_recorder_reports_a_wrong_stride() -> None:
    """The comparison can fail: a kernel returning the transpose of what it should is caught."""
    recorder = strides.Recorder("as_sampled")
    x = torch.randn(3, 4, device=EMBER)
    recorder.call(aten.clone.default, (x,), {})
    assert recorder.differences == {} and recorder.compared == 1

    def wrong_clone(t: torch.Tensor) -> torch.Tensor:
        return t.t().contiguous().t()  # column-major: (1, 3) strides instead of (4, 1)

    recorder.call(_Renamed(wrong_clone, aten.clone.default), (x,), {})
    (detail,) = recorder.differences.values()
    assert "Stride mismatch" in detail and "(1, 3)" in detail and "(4, 1)" in detail, detail


class _Renamed:
    """A callable standing in for an operator: its own body, the operator's name and tags."""

    def __init__(self, body: Callable[..., Any], op: Any) -> None:
        self.body, self.tags, self.name = body, op.tags, str(op)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if any(isinstance(t, torch._subclasses.FakeTensor) for t in tree_leaves((args, kwargs))):
            return aten.clone.default(*args, **kwargs)  # FakeTensor's prediction: the real clone's
        return self.body(*args, **kwargs)

    def __str__(self) -> str:
        return self.name


# -- The measured cases ------------------------------------------------------------------------------


def fake(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """fn's outputs on ember-device fake copies of args: FakeTensor's prediction."""
    with FakeTensorMode() as mode:
        fake_args, fake_kwargs = tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        return fn(*fake_args, **fake_kwargs)


def layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    return tuple(t.shape), t.stride()


def assert_as_predicted(fn: Callable[..., Any], *args: Any) -> Any:
    """fn on ember has the predicted sizes and strides; returns the real outputs."""
    real, predicted = fn(*args), fake(fn, *args)
    for r, f in zip(tree_leaves(real), tree_leaves(predicted), strict=True):
        if isinstance(r, torch.Tensor):
            assert layout(r) == layout(f)
    return real


def heads_view(qkv: torch.Tensor) -> list[torch.Tensor]:
    """q, k, v of (B, H, L, E) viewed from one (B, L, 3, H, E) projection, as TransformerBlock does."""
    return [t.transpose(1, 2) for t in qkv.unbind(2)]


def test_attention_output_has_the_query_layout() -> None:
    qkv = torch.randn(2, 16, 3, 4, 32)
    q, k, v = heads_view(qkv)
    on_ember = heads_view(qkv.to(EMBER))
    assert on_ember[0].stride() == q.stride() == (6144, 32, 384, 1)

    def overrideable(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> Any:
        return aten._scaled_dot_product_fused_attention_overrideable(q, k, v, is_causal=True)

    out, logsumexp = assert_as_predicted(overrideable, *on_ember)[:2]
    assert out.stride() == (2048, 32, 128, 1)  # (B, L, H, E) in memory, viewed (B, H, L, E)
    assert logsumexp.stride() == (64, 16, 1)
    cpu = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert cpu.stride() == out.stride()
    torch.testing.assert_close(out.cpu(), cpu)


def test_attention_gradients_have_their_inputs_layouts() -> None:
    q, k, v = heads_view(torch.randn(2, 16, 3, 4, 32, device=EMBER))
    out, lse = aten._scaled_dot_product_fused_attention_overrideable(q, k, v, is_causal=True)[:2]
    grad = torch.randn(out.shape, device=EMBER).transpose(1, 2).contiguous().transpose(1, 2)

    def backward(*args: Any) -> Any:
        g, q, k, v, o, lse = args
        return aten._scaled_dot_product_fused_attention_overrideable_backward(
            g, q, k, v, None, [True, True, True, False], o, lse, None, None, 16, 16, 0.0, True, None, None
        )

    grads = assert_as_predicted(backward, grad, q, k, v, out, lse)
    # empty_like's: the inputs' dimension order, dense (the views are every third slice of qkv).
    assert [g.stride() for g in grads[:3]] == [torch.empty_like(t).stride() for t in (q, k, v)]
    assert grads[0].stride() == (2048, 32, 128, 1)


def test_sdpa_in_a_transformer_block_matches_fake_tensor_and_the_cpu() -> None:
    """The attention kernel's output inside the book's TransformerBlock: the CPU's strides (its flash
    kernel, aten::_scaled_dot_product_flash_attention_for_cpu) and FakeTensor's."""
    torch.manual_seed(0)
    block = models.TransformerBlock(dim=64, heads=4)
    x = torch.randn(2, 16, 64)
    seen: dict[str, tuple[int, ...]] = {}

    class Attention(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            out = func(*args, **(kwargs or {}))
            if "scaled_dot_product" in str(func):
                seen[args[0].device.type] = out[0].stride()
                if args[0].device.type == "ember":
                    seen["fake"] = fake(func, *args, **(kwargs or {}))[0].stride()
            return out

    with Attention():
        expected = block(x)
        got = block.to(EMBER)(x.to(EMBER))
    assert seen["ember"] == seen["cpu"] == seen["fake"] == (1024, 16, 64, 1)
    torch.testing.assert_close(got.cpu(), expected)


@pytest.mark.parametrize("channels_last", ["input", "weight"])
def test_convolution_is_contiguous_as_fake_tensor_predicts(channels_last: str) -> None:
    """The documented difference from the CPU: for a backend outside PyTorch FakeTensor predicts a
    contiguous result whatever the operands' layout; the CPU's oneDNN returns channels-last."""
    x, w, b = torch.randn(2, 3, 16, 16), torch.randn(64, 3, 4, 4), torch.randn(64)
    if channels_last == "input":
        x = x.contiguous(memory_format=torch.channels_last)
    else:
        w = w.contiguous(memory_format=torch.channels_last)

    def conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, b, stride=4)

    got = assert_as_predicted(conv, x.to(EMBER), w.to(EMBER), b.to(EMBER))
    assert got.stride() == (1024, 16, 4, 1)
    cpu = conv(x, w, b)
    assert cpu.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.cpu(), cpu)


def test_convolution_backward_is_contiguous_as_fake_tensor_predicts() -> None:
    x = torch.randn(2, 8, 10, 10).contiguous(memory_format=torch.channels_last)
    w = torch.randn(16, 8, 3, 3).contiguous(memory_format=torch.channels_last)
    g = torch.randn(2, 16, 10, 10)

    def backward(g: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> Any:
        return aten.convolution_backward(g, x, w, [16], [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True] * 3)

    grads = assert_as_predicted(backward, g.to(EMBER), x.to(EMBER), w.to(EMBER))
    assert grads[0].is_contiguous() and grads[1].is_contiguous()
    for got, expected in zip(grads, backward(g, x, w), strict=True):
        torch.testing.assert_close(got.cpu(), expected)


def test_conv_transpose2d_channels_last() -> None:
    x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    w = torch.randn(8, 4, 3, 3)
    got = assert_as_predicted(lambda x, w: F.conv_transpose2d(x, w, stride=2), x.to(EMBER), w.to(EMBER))
    assert got.is_contiguous()
    torch.testing.assert_close(got.cpu(), F.conv_transpose2d(x, w, stride=2))


@pytest.mark.parametrize("legit", [False, True])
def test_batch_norm_eval_saves_per_channel_statistics(legit: bool) -> None:
    x = torch.randn(4, 8, 6, 6).contiguous(memory_format=torch.channels_last)
    mean, var = torch.randn(8), torch.rand(8) + 0.5
    op = aten._native_batch_norm_legit if legit else aten.native_batch_norm

    def eval_norm(x: torch.Tensor, mean: torch.Tensor, var: torch.Tensor) -> Any:
        return op(x, None, None, mean, var, False, 0.1, 1e-5)

    out, save_mean, save_invstd = assert_as_predicted(eval_norm, x.to(EMBER), mean.to(EMBER), var.to(EMBER))
    assert save_mean.shape == save_invstd.shape == (8,)
    assert eval_norm(x, mean, var)[1].shape == (0,)  # the CPU's own kernel: empty
    torch.testing.assert_close(save_mean.cpu(), mean)
    torch.testing.assert_close(save_invstd.cpu(), (var + 1e-5).rsqrt())
    torch.testing.assert_close(out.cpu(), eval_norm(x, mean, var)[0])


def test_batch_norm_eval_module_backward_on_ember() -> None:
    """Evaluation's backward reads the running statistics, not the saved ones: same gradients."""
    norm = torch.nn.BatchNorm2d(8).eval()
    norm.running_mean.uniform_()
    on_ember = copy.deepcopy(norm).to(EMBER)
    x = torch.randn(4, 8, 6, 6, requires_grad=True)
    e = x.detach().to(EMBER).requires_grad_()
    norm(x).square().sum().backward()
    on_ember(e).square().sum().backward()
    torch.testing.assert_close(e.grad.cpu(), x.grad)
    torch.testing.assert_close(on_ember.weight.grad.cpu(), norm.weight.grad)
    torch.testing.assert_close(on_ember.bias.grad.cpu(), norm.bias.grad)


LAYOUT_CASES: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], str]] = {
    "pad.replicate": (lambda x: F.pad(x, (1, 2, 2, 1), mode="replicate"), "channels_last"),
    "pad.replicate_negative": (lambda x: F.pad(x, (-1, 2, -2, 1), mode="replicate"), "channels_last"),
    "pad.negative": (lambda x: F.pad(x, (-1, 2, -2, 1)), "channels_last"),
    "pad.negative_noncontiguous": (lambda x: F.pad(x, (-1, 2, -2, 1)), "noncontiguous"),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), "channels_last"),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), "channels_last"),
}
# Where the meta kernel keeps channels-last for the CPU only (its comment lists the devices' kernels),
# ember is contiguous like every device but the CPU.
CONTIGUOUS_OFF_CPU = {"pixel_shuffle"}


@pytest.mark.parametrize("name", sorted(LAYOUT_CASES))
def test_layout_preserving_ops(name: str) -> None:
    fn, kind = LAYOUT_CASES[name]
    if kind == "channels_last":
        x = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last)
        on_ember = x.to(EMBER)
    else:  # every other column of a wider tensor, on both devices
        wide = torch.randn(2, 8, 6, 12)
        x, on_ember = wide[..., ::2], wide.to(EMBER)[..., ::2]
    assert on_ember.stride() == x.stride()
    got = assert_as_predicted(fn, on_ember)
    expected = fn(x)
    if name in CONTIGUOUS_OFF_CPU:
        assert got.is_contiguous() and expected.is_contiguous(memory_format=torch.channels_last)
    else:
        assert got.stride() == expected.stride()
    torch.testing.assert_close(got.cpu(), expected)


def test_dropout_backward_keeps_the_gradient_layout() -> None:
    grad = torch.randn(2, 8, 6, 6).contiguous(memory_format=torch.channels_last).to(EMBER)
    mask = torch.rand(2, 8, 6, 6, device=EMBER) > 0.5
    got = assert_as_predicted(lambda g, m: aten.native_dropout_backward(g, m, 2.0), grad, mask)
    assert got.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(got.cpu(), grad.cpu() * mask.cpu() * 2.0)


# -- The book's models, compiled ---------------------------------------------------------------------


def compiled_equals_eager(model: torch.nn.Module, x: torch.Tensor) -> None:
    """torch.compile(model) on ember against the model eagerly on ember: outputs, the input's and every
    parameter's gradient."""
    torch._dynamo.reset()
    model = model.to(EMBER)
    x = x.to(EMBER)
    results = []
    for run_model in (model, torch.compile(model)):
        model.zero_grad(set_to_none=True)
        leaf = x.detach().clone().requires_grad_()
        out = run_model(leaf)
        out.square().sum().backward()
        grads = {name: p.grad.cpu() for name, p in model.named_parameters()}
        results.append((out.detach().cpu(), leaf.grad.cpu(), grads))
    (eager_out, eager_dx, eager_grads), (out, dx, grads) = results
    torch.testing.assert_close(out, eager_out, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(dx, eager_dx, rtol=1e-4, atol=1e-5)
    assert grads.keys() == eager_grads.keys()
    for name in grads:
        torch.testing.assert_close(grads[name], eager_grads[name], rtol=1e-4, atol=1e-5, msg=name)


def test_compiled_transformer_block_equals_eager() -> None:
    torch.manual_seed(0)
    compiled_equals_eager(models.TransformerBlock(dim=64, heads=4), torch.randn(2, 16, 64))


def test_compiled_tiny_vit_equals_eager() -> None:
    torch.manual_seed(0)
    compiled_equals_eager(models.TinyViT(image=16, patch=4, dim=64, heads=4), torch.randn(2, 3, 16, 16))
