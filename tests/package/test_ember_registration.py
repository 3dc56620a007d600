"""`import torch_ember` makes "ember" a PyTorch device with a `torch.ember` module."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch_ember

CUDA_NAMES = [
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "device",
    "synchronize",
    "is_initialized",
    "init",
    "memory_allocated",
    "max_memory_allocated",
    "reset_peak_memory_stats",
    "memory_reserved",
    "empty_cache",
]


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def out_of_range(index: int) -> str:
    """The device guard's message for a bad ember device index (EmberGuard.cpp)."""
    return rf"ember driver error: invalid device ordinal: device index {index} is out of range: there are 2 ember devices \(0\.\.1\)"


def test_privateuse1_is_renamed_to_ember() -> None:
    assert torch._C._get_privateuse1_backend_name() == "ember"
    assert torch.device("ember:1").type == "ember"
    assert torch.device("ember:1").index == 1


def test_device_module_is_torch_ember() -> None:
    assert torch.ember is torch_ember.device_module
    assert sys.modules["torch.ember"] is torch_ember.device_module
    missing = [name for name in CUDA_NAMES if not hasattr(torch.ember, name)]
    assert not missing
    # Each exported name is one torch.cuda also has (we mirror it, we don't invent), or one that PyTorch
    # asks of a PrivateUse1 device module only (torch.autocast calls get_amp_supported_dtype).
    # A class named after the device mirrors CUDA's (EmberGraph is torch.cuda.CUDAGraph's counterpart).
    asked_of_privateuse1 = {"get_amp_supported_dtype"}
    mirrored = {name.replace("Ember", "CUDA", 1) for name in torch.ember.__all__}
    assert mirrored <= set(dir(torch.cuda)) | asked_of_privateuse1


def test_device_queries() -> None:
    assert torch.ember.is_available()
    assert torch.ember.device_count() == 2
    assert torch.ember.is_initialized()
    torch.ember.init()
    assert torch.ember.current_device() == 0


@pytest.mark.parametrize("device", [1, "ember:1", torch.device("ember", 1)])
def test_set_device_accepts_index_string_and_device(device: int | str | torch.device) -> None:
    torch.ember.set_device(device)
    assert torch.ember.current_device() == 1
    torch.ember.set_device(0)
    assert torch.ember.current_device() == 0


def test_set_device_rejects_other_device_types() -> None:
    with pytest.raises(ValueError, match="expected an ember device, got 'cpu'"):
        torch.ember.set_device("cpu")


def test_device_context_manager_restores_previous_device() -> None:
    with torch.ember.device(1):
        assert torch.ember.current_device() == 1
        with torch.ember.device("ember:0"):
            assert torch.ember.current_device() == 0
        assert torch.ember.current_device() == 1
    assert torch.ember.current_device() == 0


def test_device_context_manager_restores_on_error() -> None:
    with pytest.raises(KeyError), torch.ember.device(1):
        raise KeyError("boom")
    assert torch.ember.current_device() == 0


def test_device_context_manager_with_none_or_negative_index_is_a_no_op() -> None:
    torch.ember.set_device(1)
    for device in (None, -1):
        with torch.ember.device(device):
            assert torch.ember.current_device() == 1
    assert torch.ember.current_device() == 1


def test_current_device_is_per_thread() -> None:
    import threading

    seen: list[int] = []
    torch.ember.set_device(1)
    thread = threading.Thread(target=lambda: seen.append(torch.ember.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]  # a new thread starts on device 0, like CUDA
    assert torch.ember.current_device() == 1


def test_synchronize_checks_the_device() -> None:
    torch.ember.synchronize()
    torch.ember.synchronize(1)
    torch.ember.synchronize("ember:1")
    with pytest.raises(RuntimeError, match=out_of_range(2)):
        torch.ember.synchronize(2)


def test_importing_again_is_harmless() -> None:
    module = torch.ember
    importlib.reload(torch_ember)
    assert torch.ember is module
    assert torch._C._get_privateuse1_backend_name() == "ember"
    assert hasattr(torch.Tensor, "is_ember")


def test_import_in_a_fresh_process() -> None:
    """What a user does first: import, make a tensor, read it back."""
    code = (
        "import torch, torch_ember\n"
        "x = torch.arange(4.0).to('ember')\n"
        "print(x.device, x.is_ember, x.cpu().tolist())\n"
    )
    result = run_python(code)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ember:0 True [0.0, 1.0, 2.0, 3.0]"


@pytest.mark.parametrize(
    "setup",
    [
        # Another library's PrivateUse1 kernel (what a chapter build of the book registers).
        "lib = torch.library.Library('aten', 'IMPL')\n"
        "lib.impl('empty.memory_format', lambda *args, **kwargs: None, 'PrivateUse1')\n",
        # Another backend's CPU fallback.
        "lib = torch.library.Library('_', 'IMPL')\n"
        "lib.fallback(lambda *args, **kwargs: None, 'PrivateUse1')\n",
        # Another backend's device name.
        "torch.utils.rename_privateuse1_backend('foo')\n",
    ],
    ids=["kernel", "fallback", "name"],
)
def test_import_refuses_a_second_privateuse1_backend(setup: str) -> None:
    result = run_python(f"import torch\n{setup}import torch_ember\n")
    assert result.returncode != 0
    assert "ImportError: torch_ember: another PrivateUse1 backend" in result.stderr
    assert "import torch_ember in a fresh process" in result.stderr


def test_generated_tensor_methods() -> None:
    cpu = torch.arange(6, dtype=torch.float32)
    assert not cpu.is_ember
    x = cpu.ember()
    assert x.is_ember
    assert x.device == torch.device("ember:0")
    assert torch.equal(x.cpu(), cpu)
    assert cpu.ember(1).device == torch.device("ember:1")
    with torch.ember.device(1):
        assert cpu.ember().device == torch.device("ember:1")


def test_generated_module_method() -> None:
    layer = torch.nn.Linear(3, 2)
    expected = {name: p.detach().clone() for name, p in layer.named_parameters()}
    layer.ember()
    for name, parameter in layer.named_parameters():
        assert parameter.is_ember, name
        assert torch.equal(parameter.detach().cpu(), expected[name]), name


def test_manual_seed_does_not_warn_about_ember() -> None:
    # torch.manual_seed seeds the PrivateUse1 device through torch.ember._is_in_bad_fork and
    # manual_seed_all; without them it warns "Set seed for `ember` device does not take effect".
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(0)


def test_the_book_shows_this_device_module() -> None:
    # The book loads this very package by path (book.device_module()); there is no second copy.
    path = Path(torch.ember.__file__)
    assert (path.parent.parent.name, path.parent.name, path.name) == (
        "torch_ember",
        "device_module",
        "__init__.py",
    )
