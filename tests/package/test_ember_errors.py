"""Bad input fails with an error that says which device and what is wrong."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable

import pytest
import torch


def out_of_range(index: int) -> str:
    """The device guard's message for a bad ember device index (EmberGuard.cpp)."""
    return rf"ember driver error: invalid device ordinal: device index {index} is out of range: there are 2 ember devices \(0\.\.1\)"


def test_invalid_device_index() -> None:
    with pytest.raises(RuntimeError, match=out_of_range(7)):
        torch.empty(2, device="ember:7")


def test_invalid_device_index_in_a_copy() -> None:
    with pytest.raises(RuntimeError, match=out_of_range(2)):
        torch.ones(2).to("ember:2")


def test_set_device_out_of_range() -> None:
    with pytest.raises(RuntimeError, match=out_of_range(5)):
        torch.ember.set_device(5)
    assert torch.ember.current_device() == 0


def test_pin_memory_is_rejected() -> None:
    with pytest.raises(
        RuntimeError,
        match=r"ember: aten::empty.memory_format does not support pin_memory=True",
    ):
        torch.empty(2, device="ember", pin_memory=True)


def test_negative_size_is_rejected() -> None:
    with pytest.raises(
        RuntimeError,
        match=r"ember: aten::empty.memory_format got the negative size -3 in \[2, -3\]",
    ):
        torch.empty(2, -3, device="ember")
    with pytest.raises(
        RuntimeError,
        match=r"ember: aten::empty_strided got the negative size -1 in \[2, -1\]",
    ):
        torch.empty_strided((2, -1), (1, 1), device="ember")


@pytest.mark.parametrize("layout", [torch.jagged])
def test_non_strided_layout_is_rejected(layout: torch.layout) -> None:
    # Sparse layouts are ember's too (csrc/sparse/, tests in test_ember_sparse.py); a jagged one is not.
    with pytest.raises(
        RuntimeError,
        match=rf"^ember: aten::empty.memory_format does not support layout={layout}: "
        r"ember tensors are strided \(dense\) only",
    ):
        torch.empty(2, device="ember", layout=layout)


# Every device mismatch is refused in PyTorch's words (its device-generic tests and users match
# on them): structured operators (add, mul, where) by PyTorch's own device check, operators that
# reach the CPU fallback (cat, out= variants) by ember's, which adds its detail after them.
SAME_DEVICE = "Expected all tensors to be on the same device, but found at least two devices"
TWO_DEVICES = rf"^{SAME_DEVICE}, ember:0 and ember:1!"
MIXED_OPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add,
    "mul": torch.mul,
    "cat": lambda a, b: torch.cat([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "add_out": lambda a, b: torch.add(a, b, out=torch.empty(2, 2, device="ember:0")),
    "add_": lambda a, b: a.add_(b),
}


@pytest.mark.parametrize("name", MIXED_OPS)
def test_mixing_ember_devices_is_rejected(name: str) -> None:
    a = torch.ones(2, 2, device="ember:0")
    b = torch.ones(2, 2, device="ember:1")
    with pytest.raises(RuntimeError, match=TWO_DEVICES):
        MIXED_OPS[name](a, b)


# ember's native matrix products check their operands themselves: PyTorch's sentence first, then
# ember's detail, which names the operator that ran (matmul and linear run mm.out or addmm.out), and
# the argument names and devices of the two tensors that disagree.
MIXED_PRODUCTS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], torch.Tensor], str]] = {
    "matmul": (
        torch.matmul,
        r"aten::mm\.out expects all tensors on one ember device, got self on ember:0 and mat2 on ember:1",
    ),
    "mm_out": (
        lambda a, b: torch.mm(a, a, out=b),
        r"aten::mm\.out expects all tensors on one ember device, got self on ember:0 and out on ember:1",
    ),
    "addmm": (
        lambda a, b: torch.addmm(b, a, a),
        r"aten::addmm\.out expects all tensors on one ember device, got mat1 on ember:0 and self on ember:1",
    ),
    "bmm": (
        lambda a, b: torch.bmm(a[None], b[None]),
        r"aten::bmm\.out expects all tensors on one ember device, got self on ember:0 and mat2 on ember:1",
    ),
    "linear": (
        torch.nn.functional.linear,
        r"aten::mm\.out expects all tensors on one ember device, got self on ember:0 and mat2 on ember:1",
    ),
}


@pytest.mark.parametrize("name", MIXED_PRODUCTS)
def test_mixing_ember_devices_in_a_matrix_product_is_rejected(name: str) -> None:
    a = torch.ones(2, 2, device="ember:0")
    b = torch.ones(2, 2, device="ember:1")
    op, message = MIXED_PRODUCTS[name]
    with pytest.raises(RuntimeError, match=rf"^{TWO_DEVICES} \(ember: {message}\)$"):
        op(a, b)


def test_matrix_product_of_ember_and_cpu_names_both_devices() -> None:
    a = torch.ones(2, 2, device="ember")
    b = torch.ones(2, 2)
    with pytest.raises(
        RuntimeError,
        match=rf"^{SAME_DEVICE}, ember:0 and cpu! \(ember: aten::mm\.out .* got self on ember:0 and mat2 on cpu\)$",
    ):
        torch.mm(a, b)


def test_matrix_product_of_cpu_and_ember_names_both_devices() -> None:
    a = torch.ones(2, 2, device="ember")
    b = torch.ones(2, 2)
    # The ember operand is the reference, as in PyTorch's TensorIterator (torch.add(cpu, ember) says
    # "ember:0 and cpu" too); the CPU one is named as the odd one out.
    with pytest.raises(
        RuntimeError,
        match=rf"^{SAME_DEVICE}, ember:0 and cpu! \(ember: aten::mm\.out .* got mat2 on ember:0 and self on cpu\)$",
    ):
        torch.mm(b, a)


def _cpu_sentence(call: Callable[[], object]) -> str:
    """PyTorch's own sentence for the same mismatch, from an operator whose device check is PyTorch's
    (TensorIterator's): its first line, without any detail in parentheses."""
    with pytest.raises(RuntimeError) as raised:
        call()
    return str(raised.value).splitlines()[0].split(" (")[0]


# Every check of ember's own says PyTorch's sentence first, with the same devices in the same order as
# PyTorch's own check says for an ember and a CPU tensor, then ember's detail in parentheses.
OWN_CHECKS: dict[str, tuple[Callable[[torch.Tensor, torch.Tensor], object], str]] = {
    "mm": (
        lambda e, c: torch.mm(e[0], c[0]),
        r"aten::mm\.out expects all tensors on one ember device",
    ),
    "addmm": (
        lambda e, c: torch.addmm(c[0], e[0], e[0]),
        r"aten::addmm\.out expects all tensors on one ember device, got mat1 on ember:0 and self on cpu",
    ),
    "bmm": (
        lambda e, c: torch.bmm(e, c),
        r"aten::bmm\.out expects all tensors on one ember device",
    ),
    "conv2d_cpu_weight": (
        lambda e, c: torch.nn.functional.conv2d(e[None], c[None]),
        r"aten::convolution takes ember tensors and CPU scalars, got a 4-D tensor on cpu",
    ),
    "conv2d_cpu_bias": (
        lambda e, c: torch.nn.functional.conv2d(e[None], e[None], c[0, 0, :1]),
        r"aten::convolution takes ember tensors and CPU scalars, got a 1-D tensor on cpu",
    ),
    "nll_loss_cpu_target": (
        lambda e, c: torch.nn.functional.nll_loss(e[0], c[0, :, 0].long()),
        r"aten::nll_loss_forward expects the target on ember:0, got it on cpu",
    ),
    "cross_entropy_cpu_target": (
        lambda e, c: torch.nn.functional.cross_entropy(e[0], c[0, :, 0].long()),
        r"aten::nll_loss_forward expects the target on ember:0, got it on cpu",
    ),
    "nll_loss_cpu_weight": (
        lambda e, c: torch.nn.functional.nll_loss(e[0], e[0, :, 0].long(), weight=c[0, 0]),
        r"aten::nll_loss_forward runs on ember:0",
    ),
}


@pytest.mark.parametrize("name", OWN_CHECKS)
def test_embers_own_device_checks_say_pytorchs_sentence_first(name: str) -> None:
    c = torch.zeros(2, 3, 3)
    e = c.to("ember")
    sentence = _cpu_sentence(lambda: torch.add(e, c))
    assert sentence == f"{SAME_DEVICE}, ember:0 and cpu!"
    call, detail = OWN_CHECKS[name]
    with pytest.raises(RuntimeError, match=rf"^{re.escape(sentence)} \(ember: {detail}.*\)$"):
        call(e, c)


# cpu_fallback returns its results on the device of the first tensor argument. A CPU tensor first,
# with ember tensors after it, used to give a CPU result silently: conv2d(cpu_input, ember_weight) runs
# the CPU's convolution (the input decides), whose _slow_conv2d_forward the weight sends to ember,
# which fell back. CUDA refuses a CPU tensor next to its own; so does ember, in PyTorch's words.
CPU_FIRST: dict[str, Callable[[torch.Tensor, torch.Tensor], object]] = {
    "conv2d": lambda c, e: torch.nn.functional.conv2d(c, e),
    "conv2d_grad": lambda c, e: torch.nn.functional.conv2d(c, e.requires_grad_()),
    "Conv2d": lambda c, e: torch.nn.Conv2d(2, 2, 3).to("ember")(c),
    "conv1d": lambda c, e: torch.nn.functional.conv1d(c[:, :, 0], e[:, :, 0]),
    "conv_transpose2d": lambda c, e: torch.nn.functional.conv_transpose2d(c, e),
}


@pytest.mark.parametrize("name", CPU_FIRST)
def test_a_cpu_input_first_with_ember_weights_is_refused_not_computed_on_the_cpu(
    name: str,
) -> None:
    c = torch.randn(1, 2, 5, 5)
    e = torch.randn(2, 2, 3, 3, device="ember")
    # oneDNN off: ATen's own slow convolution, whatever the shapes (with oneDNN, ATen picks it for
    # larger inputs, and its check raises first; see the test below).
    with warnings.catch_warnings(), torch.backends.mkldnn.flags(enabled=False):
        warnings.simplefilter("ignore", UserWarning)  # oneDNN's note on TF32
        with pytest.raises(
            RuntimeError,
            match=rf"^{SAME_DEVICE}, ember:0 and cpu! \(ember: aten::\S+ would run on the CPU",
        ):
            CPU_FIRST[name](c, e)


def test_a_cpu_input_that_atens_onednn_convolution_takes_is_refused_in_atens_words() -> None:
    """For the inputs ATen gives oneDNN, its own check of input and weight types speaks first (the
    words CUDA's cuDNN convolution says for a CPU input and a CUDA weight)."""
    if not torch.backends.mkldnn.is_available():
        pytest.skip("this build of PyTorch has no oneDNN")
    with pytest.raises(
        RuntimeError,
        match=r"^Input type \(torch.FloatTensor\) and weight type \(emberFloatType\)",
    ):
        torch.nn.functional.conv2d(torch.randn(8, 2, 16, 16), torch.randn(2, 2, 3, 3, device="ember"))


def test_a_cpu_scalar_first_and_cpu_indices_still_work() -> None:
    e = torch.arange(4.0, device="ember")
    assert torch.where(torch.tensor(True), e, e).device.type == "ember"
    indexed = e[torch.tensor([1, 2])]
    assert indexed.device.type == "ember"
    assert indexed.cpu().tolist() == [1.0, 2.0]


def test_mixing_ember_and_cpu_is_rejected() -> None:
    a = torch.ones(2, 2, device="ember")
    b = torch.ones(2, 2)
    with pytest.raises(RuntimeError, match=r"found at least two devices, ember:0 and cpu"):
        torch.add(a, b)


# Ember inputs, an out= tensor on the CPU: CUDA refuses with a device mismatch, in the words of
# PyTorch's generated device checks. Ops that reach the CPU fallback used to fail later, copying the
# result back (`_copy_from_and_resize` has no CPU kernel); ember's detail follows PyTorch's words.
def _long(*shape: int) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.long)


OUT_ON_CPU: dict[str, tuple[Callable[[torch.Tensor], object], str]] = {
    "nonzero": (
        lambda e: torch.nonzero(e, out=_long(0)),
        r"aten::nonzero\.out",
    ),
    "sort": (
        lambda e: torch.sort(e, out=(torch.empty(0), _long(0))),
        r"aten::sort\.values_stable",
    ),
    "topk": (
        lambda e: torch.topk(e, 2, out=(torch.empty(0), _long(0))),
        r"aten::topk\.values",
    ),
    "cumsum": (lambda e: torch.cumsum(e, 0, out=torch.empty(0)), r"aten::cumsum\.out"),
    "cat": (lambda e: torch.cat([e, e], out=torch.empty(0)), r"aten::cat\.out"),
    "clamp": (lambda e: torch.clamp(e, 0, 1, out=torch.empty(0)), r"aten::clamp\.out"),
    "max.dim": (
        lambda e: torch.max(e, 0, out=(torch.empty(0), _long(0))),
        r"aten::max\.dim_max",
    ),
}


@pytest.mark.parametrize("name", OUT_ON_CPU)
def test_an_out_tensor_on_the_cpu_is_refused_naming_both_devices(name: str) -> None:
    e = torch.tensor([[3.0, 0.0, 2.0], [1.0, 5.0, 0.0]], device="ember")
    call, op = OUT_ON_CPU[name]
    with pytest.raises(
        RuntimeError,
        match=rf"^{SAME_DEVICE}, ember:0 and cpu! \(ember: {op} writes into '\w+' on cpu",
    ):
        call(e)


def test_a_structured_out_kernel_says_what_pytorchs_generated_kernels_say() -> None:
    """ember's structured out= kernels (sum) check their out= tensor in the words of the checks
    PyTorch generates for CUDA's (its test_sum_cpu_device_mismatch matches them)."""
    e = torch.ones(3, device="ember")
    with pytest.raises(
        RuntimeError,
        match=r"^Expected out tensor to have device ember:0, but got cpu instead$",
    ):
        torch.sum(e, 0, out=torch.empty(0))


# Kernels on host views of the device's memory say the generic sentence, with ember's detail.
OWN_KERNEL_OUT_ON_CPU: dict[str, Callable[[torch.Tensor], object]] = {
    "batch_norm_host_kernel": lambda e: torch.nn.functional.batch_norm(e.T, torch.zeros(2), torch.ones(2)),
    "index_select_out": lambda e: torch.index_select(
        e, 0, torch.tensor([0], device="ember"), out=torch.empty(0)
    ),
}


@pytest.mark.parametrize("name", OWN_KERNEL_OUT_ON_CPU)
def test_ember_kernels_refuse_a_cpu_tensor_in_pytorchs_words(name: str) -> None:
    e = torch.tensor([[3.0, 0.0, 2.0], [1.0, 5.0, 0.0]], device="ember")
    with pytest.raises(RuntimeError, match=rf"^{SAME_DEVICE}, ember:0 and cpu! \(ember: "):
        OWN_KERNEL_OUT_ON_CPU[name](e)


def test_an_out_tensor_on_ember_still_works_through_the_fallback() -> None:
    e = torch.tensor([3.0, 0.0, 2.0], device="ember")
    values, indices = (
        torch.empty(0, device="ember"),
        torch.empty(0, dtype=torch.long, device="ember"),
    )
    torch.sort(e, out=(values, indices))
    assert values.cpu().tolist() == [0.0, 2.0, 3.0] and indices.cpu().tolist() == [
        1,
        2,
        0,
    ]


# ---- warnings: as many as on the CPU (issue 26) -----------------------------------------------------

UINT8_MASK_CALLS: dict[str, Callable[[str], object]] = {
    "v[mask]": lambda d: torch.randn(5, 7, 3, device=d)[_mask(d, 5)],
    "v[mask1, :, mask2]": lambda d: torch.randn(5, 7, 3, device=d)[_mask(d, 5), :, _mask(d, 3)],
    "index_put_ accumulate": lambda d: (y := torch.ones(5, 4, device=d)).index_put_(
        (_mask(d, 5),), y[_mask(d, 5)], accumulate=True
    ),
}


def _mask(device: str, n: int) -> torch.Tensor:
    return torch.tensor([1, 0, 1, 1, 0][:n] if n == 5 else [1] * n, dtype=torch.uint8, device=device)


def _warnings(call: Callable[[], object]) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [str(w.message) for w in caught]


@pytest.mark.parametrize("name", UINT8_MASK_CALLS)
def test_a_uint8_mask_warns_as_often_as_on_the_cpu(name: str) -> None:
    cpu = _warnings(lambda: UINT8_MASK_CALLS[name]("cpu"))
    ember = _warnings(lambda: UINT8_MASK_CALLS[name]("ember"))
    assert cpu and all("indexing with dtype torch.uint8 is now deprecated" in m for m in cpu)
    assert ember == cpu


def test_mode_out_on_another_device_says_what_atens_mode_says() -> None:
    """mode's own check (ATen's mode_out, CUDA's wording), not the generic sentence."""
    e = torch.ones(3, device="ember")
    with pytest.raises(RuntimeError, match=r"expected device 'ember:0' but got 'cpu' for values output"):
        torch.mode(e, 0, out=(torch.empty(0), _long(0)))
    with pytest.raises(
        RuntimeError,
        match=r"expected device 'ember:0' but got 'cpu' for indices output",
    ):
        torch.mode(e, 0, out=(torch.empty(0, device="ember"), _long(0)))
