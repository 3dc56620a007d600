"""Native matrix products (mm, addmm, bmm) and 2-D convolution on ember equal the CPU's results.

Floating-point results are compared with allclose: ember's loops add in another order than MKL,
so the last bits may differ. Integer products must be equal. Gradients go through the autograd
engine (the package registers the backend name, so backward runs on ember).
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

EMBER = torch.device("ember", 0)
Tensors = dict[str, torch.Tensor]


def host_inputs(dtype: torch.dtype = torch.float32) -> Tensors:
    generator = torch.Generator().manual_seed(11)

    def make(*shape: int) -> torch.Tensor:
        if dtype.is_floating_point:
            return torch.randn(shape, generator=generator, dtype=dtype)
        return torch.randint(-9, 10, shape, generator=generator, dtype=dtype)

    return {
        "a": make(37, 53),
        "b": make(53, 29),
        "row": make(29),
        "column": make(37, 1),
        "scalar": make(),
        "square": make(29, 29),
        "batch": make(6, 7, 5),
        "big_a": make(130, 300),
        "big_b": make(300, 270),
    }


CASES: dict[str, Callable[[Tensors], torch.Tensor]] = {
    "mm": lambda t: torch.mm(t["a"], t["b"]),
    "mm_transposed_self": lambda t: torch.mm(t["b"].T, t["a"].T),
    "mm_transposed_mat2": lambda t: torch.mm(t["a"], t["a"].T),
    "mm_sliced": lambda t: torch.mm(t["a"][::2, 1::2], t["b"][1::2, ::3]),
    "mm_expanded": lambda t: torch.mm(t["row"].expand(4, 29), t["square"]),
    "mm_blocked_sizes": lambda t: torch.mm(t["big_a"], t["big_b"]),
    "mm_blocked_transposed": lambda t: torch.mm(t["big_b"].T, t["big_a"].T),
    "mm_empty_inner": lambda t: torch.mm(t["a"][:, :0], t["b"][:0]),
    "addmm_row": lambda t: torch.addmm(t["row"], t["a"], t["b"]),
    "addmm_column": lambda t: torch.addmm(t["column"], t["a"], t["b"]),
    "addmm_scalar": lambda t: torch.addmm(t["scalar"], t["a"], t["b"]),
    "addmm_full": lambda t: torch.addmm(torch.mm(t["a"], t["b"]), t["a"], t["b"], beta=2, alpha=3),
    "addmm_transposed_bias": lambda t: torch.addmm(t["square"].T, t["square"], t["square"]),
    "addmm_inplace": lambda t: t["square"].clone().addmm_(t["square"], t["square"].T, beta=-1),
    "linear": lambda t: F.linear(t["a"], t["b"].T, t["row"]),
    "bmm": lambda t: torch.bmm(t["batch"], t["batch"].transpose(1, 2)),
    "bmm_strided_batch": lambda t: torch.bmm(t["batch"][::2], t["batch"][1::2].transpose(1, 2)),
    "bmm_transposed": lambda t: torch.bmm(t["batch"].transpose(1, 2), t["batch"]),
    "matmul_3d_2d": lambda t: torch.matmul(t["batch"], t["a"][:5, :4]),
    "matmul_broadcast_batch": lambda t: torch.matmul(t["batch"], t["batch"][0].T.expand(6, 5, 7)),
}


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device == EMBER
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    if expected.is_floating_point():
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-4)
    else:
        assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64], ids=str)
@pytest.mark.parametrize("case", CASES)
def test_matrix_products_match_cpu(case: str, dtype: torch.dtype) -> None:
    host = host_inputs(dtype)
    ember = {name: t.to(EMBER) for name, t in host.items()}
    assert_same(CASES[case](ember), CASES[case](host))


def test_out_variants_write_the_given_tensor() -> None:
    t = host_inputs()
    a, b = t["a"].to(EMBER), t["b"].to(EMBER)
    out = torch.empty(37, 29, device=EMBER)
    storage = out.untyped_storage().data_ptr()
    assert torch.mm(a, b, out=out) is out
    assert out.untyped_storage().data_ptr() == storage
    assert_same(out, t["a"] @ t["b"])
    # A transposed view as out: the result lands in the view, and so in its base.
    base = torch.zeros(29, 37, device=EMBER)
    torch.mm(a, b, out=base.T)
    assert_same(base.T, t["a"] @ t["b"])
    # out aliases an input: the product uses the inputs as they were.
    square = t["square"].to(EMBER)
    expected = t["square"] @ t["square"]
    torch.mm(square, square, out=square)
    assert_same(square, expected)
    # A zero-element out is resized.
    grown = torch.empty(0, device=EMBER)
    torch.bmm(t["batch"].to(EMBER), t["batch"].to(EMBER).transpose(1, 2), out=grown)
    assert_same(grown, torch.bmm(t["batch"], t["batch"].transpose(1, 2)))


def test_addmm_beta_zero_ignores_nan_in_input() -> None:
    t = host_inputs()
    nan_bias = torch.full((37, 29), float("nan"))
    expected = torch.addmm(nan_bias, t["a"], t["b"], beta=0)
    actual = torch.addmm(nan_bias.to(EMBER), t["a"].to(EMBER), t["b"].to(EMBER), beta=0)
    assert not expected.isnan().any()
    assert_same(actual, expected)


def test_products_on_the_second_device_stay_there() -> None:
    t = host_inputs()
    device = torch.device("ember", 1)
    result = t["a"].to(device) @ t["b"].to(device)
    assert result.device == device
    torch.testing.assert_close(result.cpu(), t["a"] @ t["b"], rtol=1e-5, atol=1e-4)


def test_linear_layer_gradients_match_cpu() -> None:
    torch.manual_seed(0)
    layer = torch.nn.Linear(53, 29).double()
    layer_e = torch.nn.Linear(53, 29).double().to(EMBER)
    layer_e.load_state_dict(layer.state_dict())
    x = host_inputs(torch.float64)["a"]
    layer(x).square().sum().backward()
    layer_e(x.to(EMBER)).square().sum().backward()
    for p, p_e in zip(layer.parameters(), layer_e.parameters(), strict=True):
        assert p_e.grad is not None and p_e.grad.device == EMBER
        torch.testing.assert_close(p_e.grad.cpu(), p.grad)


CONV_CONFIGS = [
    {"stride": 1, "padding": 0, "dilation": 1, "groups": 1},
    {"stride": 2, "padding": 1, "dilation": 1, "groups": 1},
    {"stride": 1, "padding": 2, "dilation": 2, "groups": 2},
    {"stride": (1, 2), "padding": (1, 0), "dilation": (2, 1), "groups": 4},
    {"stride": 3, "padding": 0, "dilation": 1, "groups": 8},  # depthwise
    {"stride": 1, "padding": "same", "dilation": 1, "groups": 1},
]


# padding="same" with the even kernel width warns that it pads a copy of the input (on the CPU too).
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("config", CONV_CONFIGS, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
def test_conv2d_forward_and_backward_match_cpu(
    config: dict[str, object], dtype: torch.dtype, bias: bool
) -> None:
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(8, 16, kernel_size=(3, 2), bias=bias, **config).to(dtype)  # type: ignore[arg-type]
    conv_e = torch.nn.Conv2d(8, 16, kernel_size=(3, 2), bias=bias, **config).to(dtype).to(EMBER)  # type: ignore[arg-type]
    conv_e.load_state_dict(conv.state_dict())
    images = torch.randn(3, 8, 13, 11, dtype=dtype)
    images_e = images.to(EMBER).requires_grad_()
    images = images.requires_grad_()
    out, out_e = conv(images), conv_e(images_e)
    assert out_e.grad_fn is not None and out_e.grad_fn.name() == "ConvolutionBackward0"
    tolerance = {"rtol": 1e-4, "atol": 1e-4} if dtype == torch.float32 else {}
    torch.testing.assert_close(out_e.cpu(), out.detach(), **tolerance)
    grad = torch.randn(out.shape, dtype=dtype)
    out.backward(grad)
    out_e.backward(grad.to(EMBER))
    assert images_e.grad is not None and images_e.grad.device == EMBER
    torch.testing.assert_close(images_e.grad.cpu(), images.grad, **tolerance)
    for p, p_e in zip(conv.parameters(), conv_e.parameters(), strict=True):
        assert p_e.grad is not None, "a parameter got no gradient on ember"
        torch.testing.assert_close(p_e.grad.cpu(), p.grad, **tolerance)


def test_conv2d_backward_from_sum_and_non_contiguous_input() -> None:
    # sum() hands backward an expanded (stride 0) gradient; the input is a channels-last tensor.
    torch.manual_seed(2)
    weight = torch.randn(4, 3, 3, 3, dtype=torch.float64)
    images = torch.randn(2, 3, 9, 9, dtype=torch.float64).to(memory_format=torch.channels_last)
    leaves = [weight.clone().requires_grad_(), images.clone().requires_grad_()]
    leaves_e = [weight.to(EMBER).requires_grad_(), images.to(EMBER).requires_grad_()]
    F.conv2d(leaves[1], leaves[0], padding=1).sum().backward()
    F.conv2d(leaves_e[1], leaves_e[0], padding=1).sum().backward()
    for leaf, leaf_e in zip(leaves, leaves_e, strict=True):
        torch.testing.assert_close(leaf_e.grad.cpu(), leaf.grad)


def test_conv1d_runs_as_a_2d_convolution() -> None:
    torch.manual_seed(3)
    x, w, b = torch.randn(2, 3, 20), torch.randn(5, 3, 4), torch.randn(5)
    expected = F.conv1d(x, w, b, stride=2, padding=1)
    actual = F.conv1d(x.to(EMBER), w.to(EMBER), b.to(EMBER), stride=2, padding=1)
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-5)


def test_small_network_trains_like_on_cpu() -> None:
    torch.manual_seed(4)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 8, 3, stride=2, groups=4),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 4 * 4, 10),
    ).double()
    model_e = (
        torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1),
            torch.nn.ReLU(),
            torch.nn.Conv2d(8, 8, 3, stride=2, groups=4),
            torch.nn.Flatten(),
            torch.nn.Linear(8 * 4 * 4, 10),
        )
        .double()
        .to(EMBER)
    )
    model_e.load_state_dict(model.state_dict())
    x = torch.randn(5, 3, 9, 9, dtype=torch.float64)
    for net, inputs in ((model, x), (model_e, x.to(EMBER))):
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(2):
            optimizer.zero_grad()
            net(inputs).square().mean().backward()
            optimizer.step()
    for p, p_e in zip(model.parameters(), model_e.parameters(), strict=True):
        torch.testing.assert_close(p_e.detach().cpu(), p.detach())


def error(op: str, device: str, reason: str) -> str:
    return re.escape(f"ember: {op}") + ".*" + re.escape(device) + ".*" + re.escape(reason)


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (
            lambda a: a @ a.T.to("ember:1"),
            error("aten::mm.out", "self on ember:0", "and mat2 on ember:1"),
        ),
        (
            lambda a: torch.mm(a, a.T, out=torch.empty(0)),
            error("aten::mm.out", "self on ember:0", "and out on cpu"),
        ),
        (
            lambda a: torch.mm(a, a.double().T, out=torch.empty(0, device="ember")),
            error("aten::mm.out", "ember:0", "expects one dtype, got self Float and mat2 Double"),
        ),
        (
            lambda a: torch.mm(a, a, out=torch.empty(0, device="ember")),
            error("aten::mm.out", "ember:0", "shapes cannot be multiplied ([4, 6] and [4, 6])"),
        ),
        (
            lambda a: torch.addmm(torch.zeros(3, device="ember"), a, a.T, out=torch.empty(0, device="ember")),
            error("aten::addmm.out", "ember:0", "input of shape [3] cannot be broadcast to [4, 4]"),
        ),
        (
            lambda a: torch.bmm(a.expand(2, 4, 6), a.T.expand(3, 6, 4), out=torch.empty(0, device="ember")),
            error("aten::bmm.out", "ember:0", "expects equal batch sizes"),
        ),
    ],
    # (int32 and complex products, transposed, 3-D and integer convolutions work since chapter 14's
    # host kernel: tests/package/test_ember_nn.py)
    ids=[
        "mm_two_devices",
        "mm_cpu_out",
        "mm_mixed_dtypes",
        "mm_shapes",
        "addmm_broadcast",
        "bmm_batches",
    ],
)
def test_bad_input_names_op_and_device(call: Callable[[torch.Tensor], object], pattern: str) -> None:
    a = torch.arange(24.0).reshape(4, 6).to(EMBER)
    with pytest.raises(RuntimeError, match=pattern):
        call(a)
