"""Host <-> device and device <-> device copies are bit-exact, whatever the layout."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

DTYPES = [
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
]
SHAPES = [(), (0,), (3, 0, 2), (1,), (7,), (4, 5), (2, 3, 4)]


def random_tensor(shape: tuple[int, ...], dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    """Random *bit patterns* (NaN payloads, infinities, subnormals, -0.0 included) of `dtype`."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = int(torch.Size(shape).numel())
    raw = torch.randint(0, 256, (count * itemsize,), dtype=torch.uint8, generator=generator)
    return raw.view(dtype).reshape(shape)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's values as raw bytes, in logical (row-major) order."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def assert_bit_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "cpu"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(bits(actual), bits(expected))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_round_trip_is_bit_exact(shape: tuple[int, ...], dtype: torch.dtype) -> None:
    cpu = random_tensor(shape, dtype)
    x = cpu.to("ember")
    assert x.device == torch.device("ember:0")
    assert x.dtype == dtype
    assert x.shape == cpu.shape
    assert_bit_exact(x.cpu(), cpu)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64], ids=str)
def test_special_float_values_round_trip(dtype: torch.dtype) -> None:
    info = torch.finfo(dtype)
    values = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, info.tiny / 4, info.max, info.min]
    cpu = torch.tensor(values, dtype=dtype)
    # NaNs with other payloads and signs, which a value-based copy could canonicalize.
    raw = cpu.view(torch.uint8).reshape(len(values), -1)
    raw[0, 0] ^= 0x01
    payload = cpu.clone().view(torch.uint8).reshape(len(values), -1)
    payload[0, -1] ^= 0x80  # flip the sign bit of the NaN (little-endian: last byte)
    for tensor in (cpu, payload.view(dtype).reshape(-1)):
        assert_bit_exact(tensor.to("ember").cpu(), tensor)


NON_CONTIGUOUS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transposed": lambda t: t.t(),
    "permuted": lambda t: t.reshape(2, 3, 4).permute(2, 0, 1),
    "strided_slice": lambda t: t[::2, 1::3],
    "column": lambda t: t[:, 2],
    "expanded": lambda t: t[:1].expand(5, 6),
}


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_non_contiguous_host_to_device(layout: str, dtype: torch.dtype) -> None:
    source = NON_CONTIGUOUS[layout](random_tensor((4, 6), dtype))
    assert not source.is_contiguous()
    assert_bit_exact(source.to("ember").cpu(), source)


@pytest.mark.parametrize("layout", NON_CONTIGUOUS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=str)
def test_non_contiguous_device_to_host(layout: str, dtype: torch.dtype) -> None:
    cpu = random_tensor((4, 6), dtype)
    on_device = NON_CONTIGUOUS[layout](cpu.to("ember"))
    assert not on_device.is_contiguous()
    assert_bit_exact(on_device.cpu(), NON_CONTIGUOUS[layout](cpu))


VIEWS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "view": lambda t: t.view(3, 8),
    "reshape": lambda t: t.reshape(-1),
    "select": lambda t: t[2],
    "narrow": lambda t: t.narrow(1, 1, 4),
    "unsqueeze": lambda t: t.unsqueeze(0),
    "squeeze": lambda t: t[:1].squeeze(0),
    "flatten_of_slice": lambda t: t[1:3].flatten(),
    "as_strided": lambda t: t.as_strided((3, 3), (7, 1), 1),
}


@pytest.mark.parametrize("name", VIEWS)
def test_views_share_storage_and_read_back(name: str) -> None:
    cpu = random_tensor((4, 6), torch.float32)
    x = cpu.to("ember")
    v = VIEWS[name](x)
    assert v.is_ember
    assert v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert_bit_exact(v.cpu(), VIEWS[name](cpu))


def test_writing_through_a_view_changes_the_base() -> None:
    cpu = torch.zeros(4, 6)
    x = cpu.to("ember")
    row = torch.arange(6.0)
    x[1].copy_(row)  # contiguous destination view
    x[:, 0].copy_(torch.full((4,), 9.0))  # strided destination view
    cpu[1] = row
    cpu[:, 0] = 9.0
    assert_bit_exact(x.cpu(), cpu)


def test_copy_between_ember_devices() -> None:
    cpu = random_tensor((5, 7), torch.float64)
    x0 = cpu.to("ember:0")
    x1 = x0.to("ember:1")
    assert x1.device == torch.device("ember:1")
    assert x1.untyped_storage().data_ptr() != x0.untyped_storage().data_ptr()
    assert_bit_exact(x1.cpu(), cpu)
    back = x1.to("ember:0")
    assert back.device == torch.device("ember:0")
    assert_bit_exact(back.cpu(), cpu)


def test_copy_between_ember_devices_non_contiguous() -> None:
    cpu = random_tensor((6, 4), torch.int32)
    x1 = cpu.to("ember:0").t().to("ember:1")
    assert x1.device == torch.device("ember:1")
    assert_bit_exact(x1.cpu(), cpu.t())


def test_copy_into_existing_tensor_on_the_other_device() -> None:
    cpu = random_tensor((3, 3), torch.float32)
    destination = torch.zeros(3, 3, device="ember:1")
    destination.copy_(cpu.to("ember:0"))
    assert destination.device == torch.device("ember:1")
    assert_bit_exact(destination.cpu(), cpu)


def test_clone_on_device() -> None:
    cpu = random_tensor((3, 4), torch.float32)
    x = cpu.to("ember:1")
    y = x.clone()
    assert y.device == torch.device("ember:1")
    assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert_bit_exact(y.cpu(), cpu)


@pytest.mark.parametrize("index", [0, 1])
def test_print_shows_the_ember_device(index: int) -> None:
    x = torch.tensor([[1.5, -2.0], [0.25, 4.0]]).to(f"ember:{index}")
    text = repr(x)
    assert f"device='ember:{index}'" in text
    assert text == repr(x.cpu())[: -len(")")] + f", device='ember:{index}')"
    assert str(x) == text


def test_print_of_integer_and_empty_tensors() -> None:
    assert repr(torch.arange(3).to("ember")) == "tensor([0, 1, 2], device='ember:0')"
    assert repr(torch.empty(0).to("ember")) == "tensor([], device='ember:0')"
