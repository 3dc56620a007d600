"""ember's PrivateUse1 hooks (csrc/runtime/EmberHooks.cpp) in the installed package.

The hooks are what PyTorch asks outside the dispatcher: the autograd engine,
torch.accelerator, torch.Generator, storage resizing, pinned memory and
serialization. Device queries are answered from the driver; the rest comes
through slots that later chapters plug; the package plugs them all.
"""

from __future__ import annotations

import io

import pytest
import torch


def test_ember_is_the_accelerator() -> None:
    assert torch._C._get_privateuse1_backend_name() == "ember"
    assert torch.accelerator.current_accelerator() == torch.device("ember")
    assert torch.accelerator.is_available()


def test_device_count_comes_from_the_driver() -> None:
    assert torch.accelerator.device_count() == 2
    # The hooks' own answer, not the device module's.
    assert torch._C._accelerator_hooks_device_count() == 2


@pytest.mark.parametrize("index", [1, 0])
def test_set_and_current_device_round_trip(index: int) -> None:
    torch.accelerator.set_device_index(index)
    assert torch.accelerator.current_device_index() == index
    assert torch.ember.current_device() == index
    assert torch._C._accelerator_hooks_get_current_device() == index


def test_the_hooks_set_the_device_the_guard_reads() -> None:
    assert torch._C._accelerator_hooks_exchange_device(1) == 0
    assert torch.accelerator.current_device_index() == 1
    assert torch._C._accelerator_hooks_maybe_exchange_device(0) == 1
    assert torch.ember.current_device() == 0


def test_an_out_of_range_device_index_is_refused() -> None:
    message = r"ember .*device index 7 is out of range: there are 2 ember devices \(0\.\.1\)"
    with pytest.raises(RuntimeError, match=message):
        torch.accelerator.set_device_index(7)
    with pytest.raises(RuntimeError, match=message):
        torch._C._accelerator_hooks_set_current_device(7)
    assert torch.accelerator.current_device_index() == 0


def test_backward_on_ember_matches_cpu() -> None:
    # Without hooks every backward on an ember tensor fails: the autograd engine
    # asks the device's hooks before it runs anything.
    x_cpu = torch.tensor([0.5, -1.0, 2.0, 3.5], requires_grad=True)
    w_cpu = torch.tensor([2.0, 0.25, -1.5, 1.0])
    ((x_cpu * w_cpu).sum() + (x_cpu * x_cpu).sum()).backward()

    x = x_cpu.detach().to("ember").requires_grad_()
    w = w_cpu.to("ember")
    ((x * w).sum() + (x * x).sum()).backward()

    assert x.grad is not None
    assert x.grad.device == torch.device("ember:0")
    torch.testing.assert_close(x.grad.cpu(), x_cpu.grad)


# The slots' empty answers ("no random number generator is registered (chapter 10 adds one)") are
# tested against the book's stable library (tests/book/test_stable.py): the package plugs every slot.
@pytest.mark.parametrize("device", ["ember", "ember:1"])
def test_the_package_plugs_a_generator_per_device(device: str) -> None:
    generator = torch.Generator(device=device)
    assert generator.device == torch.device(device if ":" in device else "ember:0")
    generator.manual_seed(7)
    first = torch.rand(4, device=device, generator=generator).cpu()
    generator.manual_seed(7)
    assert torch.equal(torch.rand(4, device=device, generator=generator).cpu(), first)


def test_the_package_plugs_storage_resizing() -> None:
    storage = torch.tensor([1.0, 2.0], device="ember").untyped_storage()
    storage.resize_(16)
    assert storage.nbytes() == 16
    assert storage.device == torch.device("ember:0")
    assert torch.equal(
        torch.tensor([], device="ember").set_(storage, 0, (2,)).cpu(), torch.tensor([1.0, 2.0])
    )


def test_the_package_plugs_a_pinned_allocator() -> None:
    # is_pinned() asks the accelerator's hooks about every CPU tensor.
    assert not torch.empty(4).is_pinned()
    pinned = torch.empty(4, pin_memory=True)
    assert pinned.is_pinned()
    assert torch.ones(3).pin_memory().is_pinned()


def test_a_plain_tensor_has_no_backend_metadata() -> None:
    # Chapter 12's serializer writes flags only for a non-plain storage format:
    # a plain ember tensor has no backend metadata, and torch.save/load still work.
    x = torch.tensor([1.0, 2.0, 3.0], device="ember:1")
    assert torch._C._get_tensor_metadata(x) == {}
    buffer = io.BytesIO()
    torch.save(x, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    assert loaded.device == torch.device("ember:1")
    assert torch.equal(loaded.cpu(), x.cpu())
