"""AOTInductor and `cpp_wrapper=True` on the installed torch_ember (torch_ember/compiler/aoti.py,
csrc/aoti/), and the C++ runner that runs a package without Python (extension/runner/).

One package holds every kind of call the C++ wrapper makes on ember: Inductor-generated kernels
(the ReLUs, the additions) and ATen operators through ember's C shim: `mm`, `addmm`, `bmm`,
`convolution`, attention (SDPA) and `topk`. It is compiled once (a module fixture: an AOTInductor compile
takes tens of seconds), loaded with `aoti_load_package` and compared with eager on ember, then run
by the C++ runner, built here with the runner's Makefile, and compared again.

Inputs are the runner's: a float tensor of a given shape holding (0, 1, ..., n-1) / n - 0.5.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch_ember.compiler import aoti

RUNNER = Path(__file__).resolve().parents[2] / "extension" / "runner"
SHAPES = {"image": (2, 2, 4, 4), "query": (2, 2, 4, 8), "key": (2, 2, 6, 8), "value": (2, 2, 6, 8)}


def runner_input(shape: tuple[int, ...]) -> torch.Tensor:
    """The input ember_aoti_runner makes for `shape`."""
    numel = 1
    for size in shape:
        numel *= size
    return (torch.arange(numel, dtype=torch.float32) / numel - 0.5).reshape(shape)


class Deployed(nn.Module):
    """Every extern call ember's C shim has, and generated kernels between them."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)  # convolution
        self.linear = nn.Linear(16, 8)  # addmm
        self.weight = nn.Parameter(torch.randn(8, 8))  # mm

    def forward(
        self, image: torch.Tensor, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        features = torch.relu(self.conv(image)).flatten(2)  # (2, 4, 16)
        hidden = torch.relu(self.linear(features.reshape(-1, 16)))  # (8, 8)
        hidden = (hidden @ self.weight + 1).reshape(2, 4, 8)
        gram = torch.bmm(hidden, hidden.transpose(1, 2))  # bmm
        attended = F.scaled_dot_product_attention(query, key, value) * 2  # SDPA
        top = torch.topk(attended.flatten(), 3).values  # topk
        return gram, attended, top


def inputs(device: str) -> tuple[torch.Tensor, ...]:
    return tuple(runner_input(shape).to(device) for shape in SHAPES.values())


@pytest.fixture(scope="module")
def model() -> Deployed:
    torch.manual_seed(0)
    return Deployed().to("ember").eval()


@pytest.fixture(scope="module")
def package(model: Deployed, tmp_path_factory: pytest.TempPathFactory) -> Path:
    exported = torch.export.export(model, inputs("ember"))
    path = tmp_path_factory.mktemp("aoti") / "deployed.pt2"
    return Path(torch._inductor.aoti_compile_and_package(exported, package_path=str(path)))


def test_package_equals_eager(model: Deployed, package: Path) -> None:
    loaded = torch._inductor.aoti_load_package(str(package))
    with torch.no_grad():
        expected = model(*inputs("ember"))
        outputs = loaded(*inputs("ember"))
        again = loaded(*inputs("ember"))  # the weights' copies on ember, reused
    for output, output_again, eager in zip(outputs, again, expected, strict=True):
        assert output.device == torch.device("ember:0")
        torch.testing.assert_close(output.cpu(), eager.cpu())
        torch.testing.assert_close(output_again.cpu(), eager.cpu())
    # The CPU's answer too: the package's weights are ember's, copied from the host.
    cpu_model = Deployed()
    cpu_model.load_state_dict({name: value.cpu() for name, value in model.state_dict().items()})
    with torch.no_grad():
        for output, on_cpu in zip(outputs, cpu_model(*inputs("cpu")), strict=True):
            torch.testing.assert_close(output.cpu(), on_cpu)


def test_package_calls_embers_shim(package: Path) -> None:
    """The generated wrapper calls every function of ember's C shim (not a CPU one)."""
    import zipfile

    with zipfile.ZipFile(package) as archive:
        sources = [
            archive.read(name).decode() for name in archive.namelist() if name.endswith(".wrapper.cpp")
        ]
    assert sources, "the package has no wrapper source"
    calls = {op for op in aoti.SHIM if f"AOTI_TORCH_ERROR_CODE_CHECK(aoti_torch_ember_{op}(" in sources[0]}
    assert calls == set(aoti.SHIM)
    assert "aoti_torch_cpu_" not in sources[0]


def test_cpp_wrapper_compile_equals_eager(model: Deployed) -> None:
    torch._dynamo.reset()
    compiled = torch.compile(model, options={"cpp_wrapper": True})
    with torch.no_grad():
        for output, eager in zip(compiled(*inputs("ember")), model(*inputs("ember")), strict=True):
            assert output.device == torch.device("ember:0")
            torch.testing.assert_close(output.cpu(), eager.cpu())


def test_header_choice_is_pytorchs_for_every_other_device(package: Path) -> None:
    """Ember wraps Inductor's choice of precompiled header when it first makes an ember C++
    wrapper (the package fixture did): ember gets the CPU's, every other device PyTorch's own."""
    from torch._inductor import codecache

    assert aoti._pytorch_headers is not None
    wrapper_header, prefix_header = aoti._pytorch_headers
    assert codecache._get_cpp_wrapper_header is not wrapper_header
    for device in ("cpu", "cuda", "cuda:1", "xpu", "mps", "meta"):
        for aot_mode in (False, True):
            assert codecache._get_cpp_wrapper_header(device, aot_mode) == wrapper_header(device, aot_mode)
        assert codecache._get_cpp_prefix_header(device) == prefix_header(device)
    assert codecache._get_cpp_wrapper_header("ember", True) == wrapper_header("cpu", True)
    assert codecache._get_cpp_prefix_header("ember:0") == prefix_header("cpu:0")


def test_extern_call_without_shim_is_a_clear_error() -> None:
    wrapper = aoti.EmberAotiWrapper.__new__(aoti.EmberAotiWrapper)  # the check comes before any codegen
    with pytest.raises(NotImplementedError) as raised:
        wrapper.generate_c_shim_extern_kernel_call("at::baddbmm_out", ["buf0"], "ember")
    message = str(raised.value)
    assert "ember" in message and "at::baddbmm_out" in message
    assert "ember's C shim has no aoti_torch_ember_baddbmm_out" in message
    # The CPU's calls are the CPU's shim.
    assert aoti.EmberAotiWrapper.get_c_shim_func_name("at::addmm_out", "cpu") == "aoti_torch_cpu_addmm_out"


def test_library_has_no_python() -> None:
    """libtorch_ember.so, which the runner loads, needs neither libpython nor libtorch_python."""
    library = Path(torch_ember_library())
    needed = subprocess.run(
        ["readelf", "-d", str(library)], capture_output=True, text=True, check=True
    ).stdout
    assert "libtorch_cpu.so" in needed
    assert "python" not in needed.lower()
    undefined = subprocess.run(
        ["nm", "-D", "--undefined-only", str(library)], capture_output=True, text=True, check=True
    ).stdout.split()
    assert not [symbol for symbol in undefined if symbol.startswith(("Py", "_Py", "THP"))]


def torch_ember_library() -> str:
    import torch_ember

    return str(torch_ember.LIBRARY)


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """ember_aoti_runner, built by its Makefile against this venv's torch and torch_ember."""
    out = tmp_path_factory.mktemp("runner")
    compiler = os.environ.get("CXX") or shutil.which("clang++") or "c++"
    build = subprocess.run(
        ["make", "-s", "-C", str(RUNNER), f"PYTHON={sys.executable}", f"OUT={out}", f"CXX={compiler}"],
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stderr
    return out / "ember_aoti_runner"


def test_cpp_runner_equals_eager(model: Deployed, package: Path, runner: Path) -> None:
    shapes = ["x".join(map(str, shape)) for shape in SHAPES.values()]
    # No Python in the runner's process: the environment of a plain C++ program.
    env = {"PATH": os.environ.get("PATH", ""), "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    run = subprocess.run([str(runner), str(package), *shapes], capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    with torch.no_grad():
        expected = model(*inputs("ember"))
    assert len(lines) == 3 * len(expected)
    for index, eager in enumerate(expected):
        device, shape, values = lines[3 * index : 3 * index + 3]
        assert device == "device ember:0"
        assert shape.split()[1:] == [str(size) for size in eager.shape]
        printed = torch.tensor([float(value) for value in values.split()[1:]]).reshape(eager.shape)
        torch.testing.assert_close(printed, eager.cpu().double().float())


def test_cpp_runner_reports_a_bad_package(runner: Path, tmp_path: Path) -> None:
    """A clear error and a nonzero exit, not a crash."""
    missing = tmp_path / "missing.pt2"
    run = subprocess.run([str(runner), str(missing), "2x2"], capture_output=True, text=True)
    assert run.returncode == 1
    assert "missing.pt2" in run.stderr
