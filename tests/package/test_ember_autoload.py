"""The installed torch_ember: its name, its generated methods, and loading itself on `import torch`.

The package declares a `torch.backends` entry point (extension/pyproject.toml), so `import torch` loads
it unless TORCH_DEVICE_BACKEND_AUTOLOAD=0; its `_C` registers the name "ember" in c10 while it loads
(csrc/runtime/EmberName.cpp). What needs a fresh process (autoload, the opt-out, a name already taken)
runs in one.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch_ember

CHILD_TIMEOUT_SECONDS = 300


def fresh(code: str, autoload: bool) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="1" if autoload else "0")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHILD_TIMEOUT_SECONDS,
    )


def facts_of(result: subprocess.CompletedProcess[str]) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


# --- the entry point and autoload --------------------------------------------------------------------


def test_the_package_declares_a_torch_backends_entry_point() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="torch.backends") if e.name == "ember"]
    assert entry.value == "torch_ember:_autoload"
    assert entry.load() is torch_ember._autoload
    assert torch_ember._autoload() is None  # importing did the work; calling again changes nothing
    assert torch._C._get_privateuse1_backend_name() == "ember"


def test_import_torch_alone_loads_ember() -> None:
    facts = facts_of(
        fresh(
            """
            import json, sys
            import torch
            x = torch.ones(2, device="ember:1")
            print(json.dumps({
                "loaded": "torch_ember" in sys.modules,
                "name": torch._C._get_privateuse1_backend_name(),
                "utils_name": torch.utils.backend_registration._privateuse1_backend_name,
                "accelerator": str(torch.accelerator.current_accelerator()),
                "device_module": torch.ember.__name__,
                "tensor": [str(x.device), x.is_ember, x.type(), x.cpu().tolist()],
                "module": str(torch.nn.Linear(2, 2).ember(1).weight.device),
                "storage": str(torch.ones(2).untyped_storage().ember(1).device),
                "profiler": str(torch.profiler.ProfilerActivity.PrivateUse1),
            }))
            """,
            autoload=True,
        )
    )
    assert facts["loaded"] is True
    assert facts["name"] == facts["utils_name"] == facts["accelerator"] == "ember"
    assert facts["device_module"] == "torch_ember.device_module"
    assert facts["tensor"] == ["ember:1", True, "torch.ember.FloatTensor", [1.0, 1.0]]
    assert facts["module"] == facts["storage"] == "ember:1"
    assert facts["profiler"] == "ProfilerActivity.EMBER"


def test_importing_the_package_first_with_autoload_on_works() -> None:
    # `import torch_ember` imports torch, whose autoload then loads this same entry point from the
    # package while it is still initializing (`python -m torch_ember.bench` does exactly this).
    facts = facts_of(
        fresh(
            """
            import json
            import torch_ember
            import torch
            print(json.dumps({"device": str(torch.ones(1, device="ember").device),
                              "accelerator": str(torch.accelerator.current_accelerator())}))
            """,
            autoload=True,
        )
    )
    assert facts == {"device": "ember:0", "accelerator": "ember"}


def test_autoload_off_leaves_ember_out_until_imported() -> None:
    facts = facts_of(
        fresh(
            """
            import json, sys
            import torch
            facts = {"loaded": "torch_ember" in sys.modules,
                     "accelerator": str(torch.accelerator.current_accelerator())}
            try:
                torch.device("ember")
            except RuntimeError as error:
                facts["device_error"] = str(error)
            import torch_ember
            facts["after_import"] = str(torch.ones(1, device="ember").device)
            print(json.dumps(facts))
            """,
            autoload=False,
        )
    )
    assert facts["loaded"] is False
    assert facts["accelerator"] == "None"
    assert facts["device_error"].endswith("device type at start of device string: ember")
    assert facts["after_import"] == "ember:0"


def test_the_library_names_the_device_in_c10_while_it_loads() -> None:
    # _C loaded by hand, without the package's Python: c10 knows "ember", torch.utils does not yet.
    facts = facts_of(
        fresh(
            """
            import ctypes, importlib.util, json, pathlib
            import torch
            package = pathlib.Path(importlib.util.find_spec("torch_ember").origin).parent
            ctypes.CDLL(str(next(package.glob("_C*.so"))), mode=ctypes.RTLD_GLOBAL)
            print(json.dumps({
                "name": torch._C._get_privateuse1_backend_name(),
                "utils_name": torch.utils.backend_registration._privateuse1_backend_name,
                "device": str(torch.device("ember:1")),
            }))
            """,
            autoload=False,
        )
    )
    assert facts == {"name": "ember", "utils_name": "privateuseone", "device": "ember:1"}


def test_a_name_taken_before_the_library_loads_is_a_warning_and_ember_answers_to_it() -> None:
    result = fresh(
        """
        import ctypes, importlib.util, json, pathlib, types
        import torch
        torch.utils.rename_privateuse1_backend("npu")
        package = pathlib.Path(importlib.util.find_spec("torch_ember").origin).parent
        ctypes.CDLL(str(next(package.glob("_C*.so"))), mode=ctypes.RTLD_GLOBAL)
        torch._register_device_module("npu", types.ModuleType("torch.npu"))  # the first tensor imports it
        x = torch.arange(3.0, device="npu:1")
        print(json.dumps({"name": torch._C._get_privateuse1_backend_name(), "x": [str(x.device), x.cpu().tolist()]}))
        """,
        autoload=False,
    )
    assert facts_of(result) == {"name": "npu", "x": ["npu:1", [0.0, 1.0, 2.0]]}
    assert 'ember: PrivateUse1 is already named "npu" in this process' in result.stderr


def test_the_package_refuses_a_process_whose_privateuse1_has_another_name() -> None:
    result = fresh(
        'import torch\ntorch.utils.rename_privateuse1_backend("npu")\nimport torch_ember', autoload=False
    )
    assert result.returncode == 1
    error = result.stderr.strip().splitlines()[-1]
    assert error.startswith("ImportError: torch_ember: another PrivateUse1 backend (device name 'npu')")


def test_a_package_that_cannot_load_makes_import_torch_fail_naming_it() -> None:
    # Autoload on and the package fails to import: `import torch` fails, naming the extension and the opt-out.
    result = fresh(
        """
        import sys
        sys.modules["torch_ember"] = None  # an import of torch_ember now fails, as a broken install would
        import torch
        """,
        autoload=True,
    )
    assert result.returncode == 1
    assert "RuntimeError: Failed to load the backend extension: ember." in result.stderr
    assert "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in result.stderr


# --- the name and the generated methods in this process -----------------------------------------------


def test_the_python_name_and_the_device_module() -> None:
    assert torch.utils.backend_registration._privateuse1_backend_name == "ember"
    assert torch.ember is torch_ember.device_module
    assert torch.device("ember:1").type == "ember"
    assert torch.device("privateuseone:1") == torch.device("ember:1")  # the fixed name still parses
    assert str(torch.profiler.ProfilerActivity.PrivateUse1) == "ProfilerActivity.EMBER"


def test_tensor_methods() -> None:
    t = torch.arange(3.0)
    assert not t.is_ember
    moved = t.ember(1)
    assert moved.device == torch.device("ember:1") and moved.is_ember
    assert torch.equal(moved.cpu(), t)
    torch.ember.set_device(1)
    assert t.ember().device == torch.device("ember:1")  # no index: the current device
    assert t.ember("ember:0").device == torch.device("ember:0")
    assert moved.ember(1) is moved  # already there: no copy


def test_module_and_packed_sequence_methods() -> None:
    net = torch.nn.Linear(3, 2).ember(1)
    assert {p.device for p in net.parameters()} == {torch.device("ember:1")}
    packed = torch.nn.utils.rnn.pack_sequence([torch.ones(3), torch.ones(2)])
    assert not packed.is_ember
    assert packed.ember().is_ember and packed.ember().data.device.type == "ember"


def test_storage_methods() -> None:
    storage = torch.arange(4, dtype=torch.int32).untyped_storage()
    on_ember = storage.ember(1)
    assert on_ember.is_ember and on_ember.device == torch.device("ember:1")
    assert bytes(on_ember.cpu()) == bytes(storage)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        typed = torch.arange(4.0).storage().ember(1)
        assert typed.is_ember and typed.dtype == torch.float32 and typed.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_bad_device_index_is_a_clear_error_naming_the_device() -> None:
    with pytest.raises(RuntimeError, match=r"ember") as raised:
        torch.arange(3.0).ember(torch.ember.device_count())
    assert str(torch.ember.device_count()) in str(raised.value)


def test_a_second_name_and_a_second_generation_are_refused() -> None:
    with pytest.raises(RuntimeError, match=r"has already been set! Current backend: ember"):
        torch.utils.rename_privateuse1_backend("npu")
    with pytest.raises(RuntimeError, match=r"has already been registered with is_ember"):
        torch.utils.generate_methods_for_privateuse1_backend()
    torch.utils.rename_privateuse1_backend("ember")  # the same name again is allowed
