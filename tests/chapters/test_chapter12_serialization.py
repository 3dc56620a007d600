"""Chapter 12's claims, checked on the backend the chapter ends with.

torch.save / torch.load of ember tensors (location tags, map_location, weights_only, a training
checkpoint, a checkpoint naming a device this machine lacks, loading without ember), the storage
format kept as backend metadata (flags, round trip, what views, detach and clone do with it, bad
flags), storage resize through the hooks, and the refusal to share ember memory across processes.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import ModuleType

import pytest
import torch
from checkpoints import loaded, pickle_strings, retagged, saved

from book.builds import builder
from book.run.chapter import Chapter

E = "privateuseone"


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    yield Chapter.of("serialization").build()
    gc.collect()  # let the next module's build unload this one


@pytest.fixture()
def ember(backend: builder.Build) -> ModuleType:
    return torch.privateuseone


# --- torch.save / torch.load ----------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_a_checkpoint_tags_each_storage_with_its_device_and_loads_it_back_there(index: int):
    x = torch.arange(6.0).to(f"{E}:{index}")
    data = saved(x)
    assert f"{E}:{index}" in pickle_strings(data)
    back = loaded(data, weights_only=True)
    assert back.device == torch.device(E, index)
    assert torch.equal(back.cpu(), torch.arange(6.0))


def test_map_location_sends_storages_to_the_cpu_the_other_device_or_where_a_function_says():
    data = saved(torch.arange(4.0).to(E))
    assert loaded(data, map_location="cpu").device == torch.device("cpu")
    assert loaded(data, map_location=f"{E}:1").device == torch.device(E, 1)
    assert loaded(data, map_location={f"{E}:0": f"{E}:1"}).device == torch.device(E, 1)
    seen = []

    def record(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        seen.append((location, storage.device.type))
        return storage.to(device=f"{E}:1")

    back = loaded(data, map_location=record)
    assert seen == [(f"{E}:0", "cpu")]
    assert back.device == torch.device(E, 1) and torch.equal(back.cpu(), torch.arange(4.0))


def test_a_training_checkpoint_moves_to_the_other_device_and_training_continues_identically():
    def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: str) -> None:
        optimizer.zero_grad()
        (model(torch.linspace(-1, 1, 12).reshape(4, 3).to(device)) ** 2).mean().backward()
        optimizer.step()

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2).to(E)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.1)
    for _ in range(2):
        step(model, optimizer, E)
    state = loaded(
        saved({"model": model.state_dict(), "optimizer": optimizer.state_dict()}), weights_only=True
    )
    assert state["optimizer"]["state"][0]["exp_avg"].device == torch.device(E, 0)

    model_1 = torch.nn.Linear(3, 2).to(f"{E}:1")
    model_1.load_state_dict(state["model"])
    optimizer_1 = torch.optim.Adam(model_1.parameters(), lr=0.1)
    optimizer_1.load_state_dict(state["optimizer"])
    assert optimizer_1.state[model_1.weight]["exp_avg"].device == torch.device(E, 1)
    step(model, optimizer, E)
    step(model_1, optimizer_1, f"{E}:1")
    assert torch.equal(model.weight.cpu(), model_1.weight.cpu())
    assert torch.equal(model.bias.cpu(), model_1.bias.cpu())


def test_a_checkpoint_for_a_device_this_machine_lacks_is_refused_with_what_to_do(ember: ModuleType):
    data = retagged(saved(torch.ones(2).to(E)), f"{E}:0", f"{E}:7")
    message = f"device 7 but torch.{E}.device_count() is {ember.device_count()}"
    with pytest.raises(RuntimeError, match=re.escape(message) + r".*map_location"):
        loaded(data)
    assert loaded(data, map_location="cpu").device == torch.device("cpu")


def test_without_ember_a_checkpoint_loads_to_the_cpu_and_the_default_says_so(tmp_path: Path):
    x = torch.arange(3.0).to(E)
    path = tmp_path / "x.pt"
    torch.save(x, path)
    code = (
        "import torch\n"
        "try:\n    torch.load('x.pt')\nexcept RuntimeError as error:\n    print('refused:', error)\n"
        "t = torch.load('x.pt', map_location='cpu', weights_only=True)\n"
        "print(t.device, t.tolist())\n"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    assert "refused: The PRIVATEUSEONE device module is not registered" in child.stdout
    assert "cpu [0.0, 1.0, 2.0]" in child.stdout


# --- the storage format (backend metadata) ---------------------------------------------------------


def test_a_format_is_a_flag_of_the_tensor_metadata(ember: ModuleType):
    w = torch.ones(2, 2, device=E)
    assert torch._utils.get_tensor_metadata(w) == {} and ember.storage_format(w) == "plain"
    ember.set_storage_format(w, "blocked")
    assert torch._utils.get_tensor_metadata(w) == {"ember_format_blocked": True}
    ember.set_storage_format(w, "tiled")
    assert ember.storage_format(w) == "tiled"
    ember.set_storage_format(w, "plain")
    assert torch._utils.get_tensor_metadata(w) == {}


def test_a_format_survives_save_and_load_on_either_device_and_is_dropped_on_the_cpu(ember: ModuleType):
    w = torch.randn(3, 3).to(E)
    ember.set_storage_format(w, "tiled")
    data = saved(w)
    assert "ember_format_tiled" in pickle_strings(data)
    for target in (None, f"{E}:1"):
        back = loaded(data, weights_only=True, map_location=target)
        assert ember.storage_format(back) == "tiled"
        assert torch.equal(back.cpu(), w.cpu())
    on_cpu = loaded(data, map_location="cpu")
    assert torch._utils.get_tensor_metadata(on_cpu) == {}


def test_a_plain_tensor_writes_no_flag():
    assert not any(s.startswith("ember_") for s in pickle_strings(saved(torch.ones(2, device=E))))


def test_detach_and_clone_keep_the_format_views_and_new_results_do_not(ember: ModuleType):
    w = torch.ones(4, 4, device=E)
    ember.set_storage_format(w, "tiled")
    assert ember.storage_format(w.detach()) == "tiled"
    assert ember.storage_format(w.clone()) == "tiled"
    assert ember.storage_format(w[0]) == "plain"
    assert ember.storage_format(w.t()) == "plain"
    assert ember.storage_format(w + 0) == "plain"
    assert ember.storage_format(w.to(f"{E}:1")) == "plain"
    parameter = torch.nn.Parameter(w.clone())
    assert ember.storage_format(loaded(saved(parameter), weights_only=True)) == "tiled"


def test_a_detached_copy_has_its_own_tag(ember: ModuleType):
    w = torch.ones(2, device=E)
    ember.set_storage_format(w, "tiled")
    detached = w.detach()
    ember.set_storage_format(detached, "blocked")
    assert ember.storage_format(w) == "tiled" and ember.storage_format(detached) == "blocked"


def test_clone_keeps_values_autograd_and_memory_format(ember: ModuleType):
    x = torch.arange(24.0).reshape(1, 2, 3, 4).to(E).requires_grad_()
    y = x.clone(memory_format=torch.channels_last)
    assert y.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(y.detach().cpu(), x.detach().cpu())
    y.sum().backward()
    assert torch.equal(x.grad.cpu(), torch.ones(1, 2, 3, 4))


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"ember_format_swizzled": True}, "unknown storage format flag 'ember_format_swizzled'"),
        ({"ember_format_tiled": True, "ember_format_blocked": True}, "names two storage formats"),
    ],
)
def test_bad_format_flags_are_refused_and_leave_the_tensor_as_it_was(flags, message, ember: ModuleType):
    w = torch.ones(2, device=E)
    ember.set_storage_format(w, "tiled")
    with pytest.raises(RuntimeError, match=message):
        torch._utils.set_tensor_metadata(w, flags)
    assert ember.storage_format(w) == "tiled"


def test_a_checkpoint_with_an_unknown_format_is_refused_at_load(ember: ModuleType):
    w = torch.ones(2, device=E)
    ember.set_storage_format(w, "tiled")
    data = retagged(saved(w), "ember_format_tiled", "ember_format_zzzzz")
    with pytest.raises(RuntimeError, match="unknown storage format flag 'ember_format_zzzzz'"):
        loaded(data)


def test_the_device_module_refuses_a_format_it_does_not_know_or_a_cpu_tensor(ember: ModuleType):
    with pytest.raises(ValueError, match="unknown storage format 'swizzled'"):
        ember.set_storage_format(torch.ones(1, device=E), "swizzled")
    with pytest.raises(ValueError, match="property of ember tensors; got a tensor on cpu"):
        ember.set_storage_format(torch.ones(1), "tiled")


# --- storages ---------------------------------------------------------------------------------------


def test_a_storage_is_ember_memory_and_resize_keeps_the_shared_bytes(ember: ModuleType):
    x = torch.arange(6.0).to(E)
    storage = x.untyped_storage()
    assert storage.device == torch.device(E, 0) and storage.nbytes() == 24
    # Bytes requested: chapter 11's device cache rounds each block up to 512 bytes.
    before = ember.memory_stats()["requested_bytes.all.current"]
    storage.resize_(40)
    assert storage.nbytes() == 40 and ember.memory_stats()["requested_bytes.all.current"] - before == 16
    assert storage.data_ptr() == x.data_ptr()
    assert torch.equal(x.cpu(), torch.arange(6.0))
    whole = torch.empty(0, device=E).set_(storage)
    assert whole.numel() == 10 and torch.equal(whole[:6].cpu(), torch.arange(6.0))
    del whole, x
    small = torch.arange(4.0).to(f"{E}:1")
    small.untyped_storage().resize_(8)
    assert torch.equal(torch.empty(0, device=f"{E}:1").set_(small.untyped_storage()).cpu(), torch.arange(2.0))


def test_sharing_ember_memory_across_processes_is_refused_clearly():
    x = torch.ones(3, device=E)
    assert not x.is_shared()
    with pytest.raises(
        RuntimeError, match=rf"cannot share memory of {E}:0 across processes \(share_memory_\)"
    ):
        x.share_memory_()
    with pytest.raises(RuntimeError, match=rf"cannot share memory of {E}:0 .*torch.multiprocessing"):
        ForkingPickler.dumps(x)
    with pytest.raises(RuntimeError, match="cannot share memory"):
        ForkingPickler.dumps(torch.nn.Parameter(x))
    cpu = torch.ones(3).share_memory_()
    assert cpu.is_shared()
    assert ForkingPickler.loads(ForkingPickler.dumps(cpu)).tolist() == [1.0, 1.0, 1.0]
