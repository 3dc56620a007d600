"""Chapter 12 in the package: torch.save / torch.load of ember tensors, the storage format kept as
backend metadata, storage resize through the hooks, and what ember refuses (a checkpoint for a missing
device, sharing device memory across processes, unknown format flags), each with a clear error."""

from __future__ import annotations

import os
import subprocess
import sys
from multiprocessing.reduction import ForkingPickler
from pathlib import Path

import pytest
import torch
from checkpoints import loaded, pickle_strings, retagged, saved

E = "ember"


# --- checkpoints -----------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1])
def test_checkpoints_are_tagged_ember_n_and_load_back_on_that_device(index: int):
    x = torch.arange(5.0, device=f"{E}:{index}")
    data = saved(x)
    assert f"{E}:{index}" in pickle_strings(data)
    back = loaded(data, weights_only=True)
    assert back.device == torch.device(E, index) and torch.equal(back.cpu(), torch.arange(5.0))


@pytest.mark.parametrize(
    ("target", "expected"),
    [("cpu", "cpu"), (f"{E}:1", f"{E}:1"), ({f"{E}:0": f"{E}:1"}, f"{E}:1"), (torch.device("cpu"), "cpu")],
)
def test_map_location(target: object, expected: str):
    back = loaded(saved(torch.ones(2, device=E)), map_location=target)
    assert back.device == torch.device(expected) and back.cpu().tolist() == [1.0, 1.0]


def test_a_map_location_function_gets_cpu_storages_and_their_tags():
    seen = []

    def to_device_1(storage: torch.UntypedStorage, location: str) -> torch.UntypedStorage:
        seen.append((location, storage.device.type))
        return storage.to(device=f"{E}:1")

    back = loaded(saved(torch.ones(2, device=E)), map_location=to_device_1)
    assert seen == [(f"{E}:0", "cpu")] and back.device == torch.device(E, 1)


def test_module_and_optimizer_state_round_trip_with_weights_only():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1)).to(E)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    inputs = torch.linspace(-1, 1, 12, device=E).reshape(4, 3)
    for _ in range(2):
        optimizer.zero_grad()
        model(inputs).pow(2).mean().backward()
        optimizer.step()
    state = loaded(
        saved({"model": model.state_dict(), "optimizer": optimizer.state_dict()}), weights_only=True
    )
    assert all(t.device == torch.device(E, 0) for t in state["model"].values())
    for per_parameter in state["optimizer"]["state"].values():
        assert per_parameter["exp_avg"].device == torch.device(E, 0)
        assert per_parameter["step"].device == torch.device("cpu")
    for name, value in model.state_dict().items():
        assert torch.equal(state["model"][name].cpu(), value.cpu())


def test_a_checkpoint_for_a_missing_device_is_a_clear_error():
    data = retagged(saved(torch.ones(2, device=E)), f"{E}:0", f"{E}:7")
    count = torch.ember.device_count()
    with pytest.raises(
        RuntimeError, match=rf"EMBER device 7 but torch\.ember\.device_count\(\) is {count}.*map_location"
    ):
        loaded(data)
    with pytest.raises(RuntimeError, match="EMBER device 7"):
        loaded(data, weights_only=True)
    assert loaded(data, map_location="cpu").tolist() == [1.0, 1.0]


def test_without_ember_a_checkpoint_loads_to_the_cpu(tmp_path: Path):
    torch.save({"w": torch.arange(3.0, device=E)}, tmp_path / "w.pt")
    code = (
        "import torch\n"
        "try:\n    torch.load('w.pt')\nexcept RuntimeError as error:\n    print('refused:', error)\n"
        "print(torch.load('w.pt', map_location='cpu', weights_only=True)['w'].tolist())\n"
    )
    env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    child = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    # Without the backend the name "ember" means nothing: no registered package claims the tag.
    assert "refused: don't know how to restore data location" in child.stdout
    assert "(tagged with ember:0)" in child.stdout
    assert "[0.0, 1.0, 2.0]" in child.stdout


# --- the storage format --------------------------------------------------------------------------


def test_the_storage_format_round_trips_through_a_checkpoint():
    w = torch.randn(4, 4).to(E)
    torch.ember.set_storage_format(w, "blocked")
    assert torch._utils.get_tensor_metadata(w) == {"ember_format_blocked": True}
    data = saved(w)
    assert "ember_format_blocked" in pickle_strings(data)
    for target in (None, f"{E}:1"):
        back = loaded(data, weights_only=True, map_location=target)
        assert torch.ember.storage_format(back) == "blocked" and torch.equal(back.cpu(), w.cpu())
    assert torch._utils.get_tensor_metadata(loaded(data, map_location="cpu")) == {}


def test_a_module_keeps_its_parameters_formats_through_a_state_dict():
    model = torch.nn.Linear(4, 4).to(E)
    torch.ember.set_storage_format(model.weight, "tiled")
    state = loaded(saved(model.state_dict()), weights_only=True)
    assert torch.ember.storage_format(state["weight"]) == "tiled"
    assert torch.ember.storage_format(state["bias"]) == "plain"


def test_detach_and_clone_keep_the_format_views_do_not():
    w = torch.ones(4, 4, device=E)
    torch.ember.set_storage_format(w, "tiled")
    assert torch.ember.storage_format(w.detach()) == "tiled"
    assert torch.ember.storage_format(w.clone()) == "tiled"
    assert torch.ember.storage_format(w[1:]) == "plain"
    assert torch.ember.storage_format(w.view(16)) == "plain"
    assert torch.ember.storage_format(w * 2) == "plain"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ({"ember_format_swizzled": True}, "unknown storage format flag 'ember_format_swizzled'.*ember:0"),
        ({"ember_format_tiled": True, "ember_format_blocked": True}, "names two storage formats"),
    ],
)
def test_bad_format_flags_are_clear_errors(flags: dict[str, bool], message: str):
    w = torch.ones(2, device=E)
    with pytest.raises(RuntimeError, match=message):
        torch._utils.set_tensor_metadata(w, flags)
    assert torch.ember.storage_format(w) == "plain"


def test_set_storage_format_checks_its_arguments():
    with pytest.raises(ValueError, match="unknown storage format 'swizzled'"):
        torch.ember.set_storage_format(torch.ones(1, device=E), "swizzled")
    with pytest.raises(ValueError, match="got a tensor on cpu"):
        torch.ember.set_storage_format(torch.ones(1), "tiled")


# --- storages ------------------------------------------------------------------------------------


def test_storage_resize_goes_through_the_hooks_and_keeps_the_bytes():
    x = torch.arange(4.0, device=E)
    storage = x.untyped_storage()
    assert storage.device == torch.device(E, 0)
    # The caching allocator rounds blocks up (512 bytes here), so the requested bytes tell the growth.
    before = torch.ember.memory_stats()["requested_bytes.all.current"]
    storage.resize_(32)
    assert storage.nbytes() == 32
    assert torch.ember.memory_stats()["requested_bytes.all.current"] - before == 16
    assert torch.equal(torch.empty(0, device=E).set_(storage)[:4].cpu(), torch.arange(4.0))
    storage.resize_(4)
    assert torch.empty(0, device=E).set_(storage).cpu().tolist() == [0.0]
    del x


def test_sharing_ember_memory_across_processes_is_refused():
    x = torch.ones(2, device=E)
    assert not x.is_shared()
    with pytest.raises(RuntimeError, match=r"cannot share memory of ember:0 across processes"):
        x.share_memory_()
    with pytest.raises(RuntimeError, match=r"cannot share memory of ember:0 .*torch\.multiprocessing"):
        ForkingPickler.dumps(x)
    with pytest.raises(RuntimeError, match="cannot share memory of ember:0"):
        ForkingPickler.dumps(x.untyped_storage())
    assert torch.ones(2).share_memory_().is_shared()
