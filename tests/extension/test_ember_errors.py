"""Bad input fails with an error that says which device and what is wrong."""

from __future__ import annotations

import pytest
import torch


def out_of_range(index: int) -> str:
    """The device guard's message for a bad ember device index (EmberGuard.cpp)."""
    return rf"ember: device index {index} is out of range: there are 2 ember devices \(0\.\.1\)"


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
    with pytest.raises(RuntimeError, match=r"ember.*pin"):
        torch.empty(2, device="ember", pin_memory=True)


def test_negative_size_is_rejected() -> None:
    with pytest.raises(RuntimeError, match=r"negative dimension -3"):
        torch.empty(2, -3, device="ember")


def test_sparse_layout_is_rejected() -> None:
    # A sparse layout selects the SparsePrivateUse1 dispatch key ("Sparseember"),
    # which has no kernel: the dispatcher refuses before any ember code runs.
    with pytest.raises(NotImplementedError, match=r"'aten::empty.memory_format' .* 'Sparseember' backend"):
        torch.empty(2, device="ember", layout=torch.sparse_coo)


@pytest.mark.parametrize(
    "op",
    [torch.add, torch.mul, torch.matmul],
    ids=["add", "mul", "matmul"],
)
def test_mixing_ember_devices_is_rejected(op: object) -> None:
    a = torch.ones(2, 2, device="ember:0")
    b = torch.ones(2, 2, device="ember:1")
    with pytest.raises(RuntimeError, match=r"ember:0.*ember:1|ember:1.*ember:0"):
        op(a, b)  # type: ignore[operator]


def test_mixing_ember_and_cpu_is_rejected() -> None:
    a = torch.ones(2, 2, device="ember")
    b = torch.ones(2, 2)
    with pytest.raises(RuntimeError, match=r"ember:0.*cpu|cpu.*ember:0"):
        torch.add(a, b)
