"""Quantized tensors on ember (QuantizedPrivateUse1, extension/csrc/quantized/), each against the CPU.

Every result is compared with the CPU's for the same input: the integers (`int_repr`), the quantization
parameters, the dequantized floats, sizes and strides, and the device. A quantized tensor's integers live
in ember memory; operators the CPU has no quantized kernel for raise the CPU's NotImplementedError, naming
`Quantizedember` where the CPU names `QuantizedCPU`.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from functools import partial

import pytest
import torch
from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

EMBER = torch.device("ember:0")
QTYPES = (torch.quint8, torch.qint8, torch.qint32)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    # PyTorch 2.13 warns that its quantized dtypes are deprecated, at every creation.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*quantiz.*deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*_empty_affine_quantized.*", category=UserWarning)
        yield


def same(ember: torch.Tensor, cpu: torch.Tensor) -> None:
    """`ember` is the CPU's `cpu`, on ember: dtype, scheme, parameters, shape, strides, integers, floats."""
    assert ember.device.type == "ember" and cpu.device.type == "cpu"
    assert ember.is_quantized and ember.dtype == cpu.dtype and ember.qscheme() == cpu.qscheme()
    assert ember.shape == cpu.shape and ember.stride() == cpu.stride()
    if cpu.qscheme() == torch.per_tensor_affine:
        assert (ember.q_scale(), ember.q_zero_point()) == (cpu.q_scale(), cpu.q_zero_point())
    else:
        assert torch.equal(ember.q_per_channel_scales().cpu(), cpu.q_per_channel_scales())
        assert torch.equal(ember.q_per_channel_zero_points().cpu(), cpu.q_per_channel_zero_points())
        assert ember.q_per_channel_axis() == cpu.q_per_channel_axis()
    ints = ember.int_repr()
    assert ints.device == ember.device and ints.dtype == cpu.int_repr().dtype
    assert torch.equal(ints.cpu(), cpu.int_repr())
    assert torch.equal(ember.dequantize().cpu(), cpu.dequantize())


def data(*shape: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    # Values on and between the quantization steps, and beyond the ranges, so rounding and clamping count.
    return torch.randn(*shape, generator=generator) * 4


def pair(
    qtype: torch.dtype = torch.quint8, shape: tuple[int, ...] = (4, 6)
) -> tuple[torch.Tensor, torch.Tensor]:
    x = data(*shape)
    return (
        torch.quantize_per_tensor(x.to(EMBER), 0.1, 3, qtype),
        torch.quantize_per_tensor(x, 0.1, 3, qtype),
    )


def per_channel(axis: int = 0, scales_on: str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    x = data(4, 6, 5)
    n = x.shape[axis]
    scales = torch.linspace(0.05, 0.4, n, dtype=torch.float64)
    zero_points = torch.arange(n) - 1
    ember = torch.quantize_per_channel(
        x.to(EMBER), scales.to(scales_on), zero_points.to(scales_on), axis, torch.qint8
    )
    return ember, torch.quantize_per_channel(x, scales, zero_points, axis, torch.qint8)


# Quantizing and dequantizing


@pytest.mark.parametrize("qtype", QTYPES)
def test_quantize_per_tensor_is_the_cpus_and_lives_in_ember_memory(qtype: torch.dtype) -> None:
    before = torch.ember.memory_allocated()
    ember, cpu = pair(qtype)
    assert ember.device == EMBER and ember.untyped_storage().device == EMBER
    assert torch.ember.memory_allocated() > before  # the integers are ember memory
    same(ember, cpu)
    assert "device='ember:0'" in repr(ember) and "quantization_scheme=torch.per_tensor_affine" in repr(ember)


@pytest.mark.parametrize("qtype", (torch.quint4x2, torch.quint2x4))
def test_sub_byte_types_quantize_dequantize_and_give_the_cpus_packed_bytes(qtype: torch.dtype) -> None:
    x = data(3, 5)
    ember = torch.quantize_per_tensor(x.to(EMBER), 0.1, 3, qtype)
    cpu = torch.quantize_per_tensor(x, 0.1, 3, qtype)
    assert torch.equal(ember.int_repr().cpu(), cpu.int_repr())  # two or four values a byte, 1-D
    assert torch.equal(ember.dequantize().cpu(), cpu.dequantize())


def test_quantize_per_tensor_with_tensor_parameters_and_lists() -> None:
    x = data(5, 3)
    scale, zero_point = torch.tensor(0.07), torch.tensor(10)
    cpu = torch.quantize_per_tensor(x, scale, zero_point, torch.quint8)
    for where in ("cpu", EMBER):
        same(torch.quantize_per_tensor(x.to(EMBER), scale.to(where), zero_point.to(where), torch.quint8), cpu)
    y = data(2, 2, seed=1)
    scales, zero_points = torch.tensor([0.1, 0.2]), torch.tensor([1, 2])
    ember_list = torch.quantize_per_tensor([x.to(EMBER), y.to(EMBER)], scales, zero_points, torch.qint8)
    cpu_list = torch.quantize_per_tensor([x, y], scales, zero_points, torch.qint8)
    for e, c in zip(ember_list, cpu_list, strict=True):
        same(e, c)
    for e, c in zip(torch.dequantize(ember_list), torch.dequantize(cpu_list), strict=True):
        assert e.device == EMBER and torch.equal(e.cpu(), c)


@pytest.mark.parametrize("reduce_range", (False, True))
def test_quantize_per_tensor_dynamic_chooses_the_cpus_parameters(reduce_range: bool) -> None:
    x = data(7, 9)
    ember = torch.quantize_per_tensor_dynamic(x.to(EMBER), torch.quint8, reduce_range)
    same(ember, torch.quantize_per_tensor_dynamic(x, torch.quint8, reduce_range))


@pytest.mark.parametrize("axis", (0, 1, 2))
@pytest.mark.parametrize("scales_on", ("cpu", "ember"))
def test_quantize_per_channel_is_the_cpus(axis: int, scales_on: str) -> None:
    ember, cpu = per_channel(axis, scales_on)
    same(ember, cpu)
    assert ember.qscheme() == torch.per_channel_affine and ember.q_per_channel_axis() == axis
    # The parameters stay where they were given.
    assert ember.q_per_channel_scales().device.type == scales_on


def test_quantize_per_channel_with_float_zero_points() -> None:
    x = data(3, 8)
    scales, zero_points = torch.tensor([0.1, 0.2, 0.3]), torch.tensor([0.5, -1.0, 2.0])
    cpu = torch.quantize_per_channel(x, scales, zero_points, 0, torch.quint8)
    ember = torch.quantize_per_channel(x.to(EMBER), scales, zero_points, 0, torch.quint8)
    assert ember.qscheme() == cpu.qscheme() == torch.per_channel_affine_float_qparams
    same(ember, cpu)


def test_dequantize_of_a_plain_tensor_is_a_float_copy_as_on_the_cpu() -> None:
    x = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    result = torch.dequantize(x.to(EMBER))
    assert result.device == EMBER and result.dtype == torch.float32
    assert torch.equal(result.cpu(), torch.dequantize(x))


# Creating, copying, saving


def test_empty_quantized_factories_allocate_on_ember_with_their_parameters() -> None:
    q = torch._empty_affine_quantized([2, 3], scale=0.5, zero_point=7, dtype=torch.quint8, device=EMBER)
    assert q.device == EMBER and q.dtype == torch.quint8 and (q.q_scale(), q.q_zero_point()) == (0.5, 7)
    assert q.untyped_storage().device == EMBER and q.shape == (2, 3) and q.stride() == (3, 1)
    scales, zero_points = torch.tensor([0.1, 0.2], dtype=torch.float64), torch.tensor([0, 1])
    p = torch._empty_per_channel_affine_quantized(
        [2, 4], scales=scales, zero_points=zero_points, axis=0, dtype=torch.qint8, device=EMBER
    )
    assert p.device == EMBER and p.qscheme() == torch.per_channel_affine and p.q_per_channel_axis() == 0
    assert torch.equal(p.q_per_channel_scales().cpu(), scales)
    like = torch._empty_affine_quantized([4, 4], scale=0.25, zero_point=2, dtype=torch.qint32, device="cpu")
    # From Python, the device is the default device unless given: the binding fills it in, whatever the
    # qtensor's device (torch.set_default_device('ember:1') makes a CPU qtensor's empty_quantized ember:1's).
    e = torch.empty_quantized([3], like.to(EMBER), device=EMBER)
    assert e.device == EMBER and e.dtype == torch.qint32 and (e.q_scale(), e.q_zero_point()) == (0.25, 2)
    u = torch.empty(3, dtype=torch.quint8, device=EMBER)  # an unknown quantizer, as on the CPU
    assert u.device == EMBER and u.dtype == torch.quint8
    assert torch.empty_like(q).device == EMBER and torch.empty_like(q).q_scale() == 0.5


@pytest.mark.parametrize("scheme", ("per_tensor", "per_channel"))
def test_to_ember_and_back_keeps_integers_and_parameters(scheme: str) -> None:
    _, cpu = pair(torch.qint8) if scheme == "per_tensor" else per_channel(1)
    there = cpu.to(EMBER)
    same(there, cpu)
    back = there.cpu()
    assert back.device.type == "cpu"
    assert torch.equal(back.int_repr(), cpu.int_repr()) and torch.equal(back.dequantize(), cpu.dequantize())
    other = there.to("ember:1")  # device to device
    assert other.device == torch.device("ember:1")
    assert torch.equal(other.int_repr().cpu(), cpu.int_repr())


def test_cpu_of_per_channel_parameters_on_ember_brings_them_to_the_host() -> None:
    ember, cpu = per_channel(0, scales_on="ember")
    back = ember.cpu()
    assert back.q_per_channel_scales().device.type == "cpu"
    assert torch.equal(back.dequantize(), cpu.dequantize())


def test_copy_between_quantized_tensors_and_from_floats() -> None:
    ember, cpu = pair(torch.quint8)
    target = torch._empty_affine_quantized([4, 6], scale=1.0, zero_point=0, dtype=torch.quint8, device=EMBER)
    target.copy_(ember)  # takes the source's quantizer, as the CPU's copy_ does
    same(target, cpu)
    x = data(4, 6, seed=3)
    floats = torch._empty_affine_quantized([4, 6], scale=0.2, zero_point=5, dtype=torch.qint8, device=EMBER)
    expected = torch._empty_affine_quantized([4, 6], scale=0.2, zero_point=5, dtype=torch.qint8)
    same(floats.copy_(x.to(EMBER)), expected.copy_(x))
    same(floats.fill_(1.3), expected.fill_(1.3))


@pytest.mark.parametrize("scheme", ("per_tensor", "per_channel"))
def test_save_and_load_keep_device_dtype_and_parameters(scheme: str) -> None:
    ember, cpu = pair(torch.qint8) if scheme == "per_tensor" else per_channel(2)
    buffer = io.BytesIO()
    torch.save({"q": ember, "view": ember[1:]}, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    same(loaded["q"], cpu)
    same(loaded["view"], cpu[1:])
    assert loaded["q"].untyped_storage().device == EMBER
    buffer.seek(0)
    on_cpu = torch.load(buffer, map_location="cpu")["q"]
    assert on_cpu.device.type == "cpu" and torch.equal(on_cpu.int_repr(), cpu.int_repr())


# Views and shapes


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda q: q.view(6, 4),
    "view -1": lambda q: q.view(-1),
    "flatten": lambda q: q.flatten(),
    "flatten 0 1": lambda q: q.unsqueeze(0).flatten(0, 1),
    "ravel": lambda q: q.ravel(),
    "reshape": lambda q: q.reshape(3, 8),
    "transpose": lambda q: q.transpose(0, 1),
    "t": lambda q: q.t(),
    "permute": lambda q: q.permute(1, 0),
    "select": lambda q: q[2],
    "slice": lambda q: q[1:3, ::2],
    "negative index": lambda q: q[-1, 1:],
    "none and ellipsis": lambda q: q[None, ..., 1],
    "squeeze": lambda q: q.unsqueeze(1).squeeze(),
    "squeeze dim": lambda q: q.unsqueeze(1).squeeze(1),
    "expand": lambda q: q[:1].expand(3, 6),
    "narrow": lambda q: q.narrow(1, 2, 3),
    "unbind": lambda q: q.unbind(0)[1],
    "chunk": lambda q: q.chunk(2, dim=1)[1],
    "unfold": lambda q: q.unfold(1, 2, 2),
}


@pytest.mark.parametrize("name", VIEWS)
@pytest.mark.parametrize("qtype", QTYPES)
def test_views_share_ember_memory_and_equal_the_cpus(name: str, qtype: torch.dtype) -> None:
    ember, cpu = pair(qtype)
    view = VIEWS[name](ember)
    same(view, VIEWS[name](cpu))
    assert view.untyped_storage().data_ptr() == ember.untyped_storage().data_ptr()  # a view, no copy


COPIES: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "flip 0": lambda q: q.flip(0),
    "flip 1": lambda q: q.flip(1),
    "flip both": lambda q: q.flip(0, -1),
    "flip of a transpose": lambda q: q.t().flip(0),
    "reshape of a transpose": lambda q: q.t().reshape(-1),
    "flatten of a transpose": lambda q: q.t().flatten(),
    "ravel of a transpose": lambda q: q.t().ravel(),
    "contiguous": lambda q: q.t().contiguous(),
    "channels last": lambda q: q.view(1, 4, 2, 3).contiguous(memory_format=torch.channels_last),
    "flip of channels last": lambda q: (
        q.view(1, 4, 2, 3).contiguous(memory_format=torch.channels_last).flip(1)
    ),
    "clone": lambda q: q.clone(),
    "clone of a slice": lambda q: q[:, 1::2].clone(),
    "index_select": lambda q: q.index_select(1, torch.tensor([4, 0, 0, 2], device=q.device)),
    "index_select of a view": lambda q: q.t().index_select(0, torch.tensor([1, 3], device=q.device)),
    "tensor index": lambda q: q[torch.tensor([3, 0, 3], device=q.device)],
    "tensor index on 2 dims": lambda q: q[
        torch.tensor([0, 2], device=q.device), torch.tensor([5, 1], device=q.device)
    ],
    "boolean mask": lambda q: q[torch.tensor([True, False, True, True], device=q.device)],
}


@pytest.mark.parametrize("name", COPIES)
@pytest.mark.parametrize("qtype", QTYPES)
def test_shape_operators_equal_the_cpus(name: str, qtype: torch.dtype) -> None:
    ember, cpu = pair(qtype)
    result = COPIES[name](ember)
    same(result, COPIES[name](cpu))
    assert result.untyped_storage().device == EMBER


def test_clone_and_views_of_per_channel_tensors_keep_the_quantizer() -> None:
    ember, cpu = per_channel(1)
    same(ember.clone(), cpu.clone())
    same(ember[1:], cpu[1:])
    # A per-channel tensor cannot be restrided (as_strided): the CPU's transpose and flip refuse, and so do
    # ember's.
    for q in (cpu, ember):
        for call in (partial(q.transpose, 0, 1), partial(q.flip, 2)):
            with pytest.raises(
                RuntimeError, match="Setting strides is possible only on uniformly quantized tensor"
            ):
                call()
    same(ember.unsqueeze(0), cpu.unsqueeze(0))  # the channel axis moves to 2
    assert ember.unsqueeze(0).q_per_channel_axis() == 2
    same(ember.unsqueeze(2).squeeze(2), cpu.unsqueeze(2).squeeze(2))


def test_equal_compares_quantizers_sizes_and_integers() -> None:
    ember, cpu = pair(torch.qint8)
    assert torch.equal(ember, ember.clone()) and torch.equal(cpu, cpu.clone())
    assert torch.equal(ember, ember.flip(0)) is torch.equal(cpu, cpu.flip(0)) is False
    other_scale = torch.quantize_per_tensor(ember.dequantize(), 0.2, 3, torch.qint8)
    assert not torch.equal(ember, other_scale)
    assert not torch.equal(ember, ember[:2])
    assert not torch.equal(ember, ember.dequantize())  # not quantized: False, as on the CPU


# Dynamic-quantized linear


@pytest.fixture(params=("x86", "fbgemm", "onednn", "qnnpack"))
def engine(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param not in torch.backends.quantized.supported_engines:
        pytest.fail(f"engine {request.param} is not in this torch build")  # never skipped
    previous = torch.backends.quantized.engine
    torch.backends.quantized.engine = request.param
    yield request.param
    torch.backends.quantized.engine = previous


def dynamic_linear(per_channel_weight: bool) -> DynamicLinear:
    generator = torch.Generator().manual_seed(1)
    weight = torch.randn(24, 40, generator=generator) * 0.1
    if per_channel_weight:
        scales = torch.rand(24, generator=generator) * 0.002 + 0.001
        weight_q = torch.quantize_per_channel(
            weight, scales, torch.zeros(24, dtype=torch.long), 0, torch.qint8
        )
    else:
        weight_q = torch.quantize_per_tensor(weight, 0.002, 0, torch.qint8)
    module = DynamicLinear(40, 24)
    module.set_weight_bias(weight_q, torch.randn(24, generator=generator))
    return module


@pytest.mark.parametrize("per_channel_weight", (False, True))
def test_dynamic_linear_on_ember_equals_the_cpu_bit_for_bit(engine: str, per_channel_weight: bool) -> None:
    module = dynamic_linear(per_channel_weight)
    for shape in ((37, 40), (2, 5, 40)):
        x = data(*shape, seed=7)
        result = module(x.to(EMBER))
        assert result.device == EMBER
        assert torch.equal(result.cpu(), module(x))
        packed = module._packed_params._packed_params
        for reduce_range in (False, True):
            for op in (torch.ops.quantized.linear_dynamic, torch.ops.quantized.linear_relu_dynamic):
                assert torch.equal(op(x.to(EMBER), packed, reduce_range).cpu(), op(x, packed, reduce_range))


def test_dynamic_linear_refuses_what_the_cpu_refuses() -> None:
    module = dynamic_linear(False)
    for x, words in (
        (data(2, 39), "The number of rows in the packB should be equal to K: 39"),
        (data(40), "larger"),
    ):
        for device in ("cpu", EMBER):
            with pytest.raises(RuntimeError, match=words):
                module(x.to(device))


def ops_inside(call: Callable[[], object]) -> set[str]:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as profile:
        call()
    return {event.key for event in profile.key_averages()}


def test_fbgemm_packed_weights_are_computed_by_ember_others_by_the_cpus_kernel() -> None:
    previous = torch.backends.quantized.engine
    try:
        for engine, on_ember in (("x86", True), ("onednn", False)):
            torch.backends.quantized.engine = engine
            module = dynamic_linear(False)
            x = data(8, 40).to(EMBER)
            inside = ops_inside(partial(module, x))
            # ember's kernel quantizes the input and multiplies integers with ember's operators; the host
            # kernel calls the engine's code directly, which the profiler does not see.
            assert ("aten::quantize_per_tensor_dynamic" in inside) is on_ember
            assert ("aten::mm" in inside) is on_ember
    finally:
        torch.backends.quantized.engine = previous


# Errors


def error_of(call: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as info:
        call()
    return info.value


@pytest.mark.parametrize(
    "call",
    (
        lambda q: torch.exp(q),
        lambda q: q + q,
        lambda q: torch.abs(q),
    ),
    ids=("exp", "add", "abs"),
)
def test_an_operator_without_a_quantized_kernel_raises_the_cpus_error(call: Callable) -> None:
    ember, cpu = pair(torch.quint8)
    on_cpu, on_ember = error_of(lambda: call(cpu)), error_of(lambda: call(ember))
    assert type(on_cpu) is type(on_ember) is NotImplementedError
    assert "'QuantizedCPU' backend" in str(on_cpu) and "'Quantizedember' backend" in str(on_ember)
    assert str(on_ember).splitlines()[0] == str(on_cpu).splitlines()[0].replace(
        "QuantizedCPU", "Quantizedember"
    )


def test_refusals_use_the_cpus_words() -> None:
    ember, cpu = pair(torch.quint8)
    ember_channels, cpu_channels = per_channel(0)
    pairs = [
        (
            lambda q, p: torch.empty(4, 6, device=q.device).copy_(q),
            "Copying from quantized Tensor to non-quantized",
        ),
        (lambda q, p: p.index_select(0, torch.tensor([1], device=q.device)), "Only per_tensor quantized"),
        (
            lambda q, p: torch.empty_strided((2,), (1,), dtype=torch.quint8, device=q.device),
            "empty_strided not",
        ),
        (lambda q, p: q.t().view(-1), "view size is not compatible"),
        (lambda q, p: p.q_scale(), "Expected quantizer->qscheme\\(\\) == kPerTensorAffine"),
        (
            lambda q, p: torch.quantize_per_tensor(q.dequantize(), 0.1, 0, torch.quint4x2).flip(0),
            "flip is not supported for tensor with data type QUInt4x2",
        ),
    ]
    for call, words in pairs:
        on_cpu, on_ember = (
            error_of(partial(call, cpu, cpu_channels)),
            error_of(partial(call, ember, ember_channels)),
        )
        assert type(on_cpu) is type(on_ember), words
        for error in (on_cpu, on_ember):
            assert re.search(words, str(error)), (words, str(error))


# The CPU's quantized tensors are untouched

# Quantized CPU results, computed in a process without ember, in one with ember loaded by `import torch`,
# and in this one.
CPU_RESULTS = """
import warnings
import torch
from torch.ao.nn.quantized.dynamic import Linear

def results():
    warnings.filterwarnings("ignore")
    g = torch.Generator().manual_seed(5)
    x = torch.randn(6, 8, generator=g) * 3
    q = torch.quantize_per_tensor(x, 0.05, 4, torch.qint8)
    p = torch.quantize_per_channel(x, torch.rand(6, generator=g) + 0.01, torch.arange(6), 0, torch.quint8)
    m = Linear(8, 3)
    w = torch.quantize_per_tensor(torch.randn(3, 8, generator=g), 0.02, 0, torch.qint8)
    m.set_weight_bias(w, torch.ones(3))
    return {
        "q": q.int_repr().tolist(), "p": p.int_repr().tolist(), "flip": q.flip(1).int_repr().tolist(),
        "index": q[torch.tensor([4, 1])].int_repr().tolist(), "dequantize": p.dequantize().tolist(),
        "linear": m(x).tolist(),
    }
"""


def test_the_cpus_quantized_results_are_the_same_with_and_without_ember() -> None:
    runs = {}
    for autoload in ("0", "1"):
        env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD=autoload)
        script = CPU_RESULTS + "\nimport json\nprint(json.dumps(results()))\n"
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr
        runs[autoload] = json.loads(done.stdout.strip().splitlines()[-1])
    namespace: dict = {}
    exec(CPU_RESULTS, namespace)
    assert runs["0"] == runs["1"] == namespace["results"]()
