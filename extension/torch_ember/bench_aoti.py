"""The AOTInductor figures of `python -m torch_ember.bench` (torch_ember/compiler/aoti.py, csrc/aoti/).

- ``aoti_vs_compiled``: the shared MLP's forward (`bench.mlp`, batch 64, no grad) run from an
  AOTInductor package (``aoti_compile_and_package`` of its export, ``aoti_load_package``) / the same
  model under ``torch.compile``, both on ember, steady state (target <= 1.1).
- ``aoti_dispatcher_vs_shim``: how an ATen call of the C++ wrapper is made, on a graph that is one
  ``torch.topk(x, 2)`` of 16 floats, so that the call's overhead is most of the time. A package that
  calls ember's C shim (``aoti_torch_ember_topk``) against one that calls the operator by name (the
  package's proxy executor, through the dispatcher), per run, dispatcher / shim.

Context: ``aoti_mlp_compiled_us``; ``aoti_topk_shim_us`` and ``aoti_topk_by_name_us``, one run of each
topk package (their difference: what the by-name route adds to one call).
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from torch_ember.bench_timing import Target, interleaved, median_us, ratio, synced

TARGETS: dict[str, Target] = {
    "aoti_vs_compiled": Target(1.1, at_most=True),
}

TABLE_ROWS = [
    ("MLP forward: AOTInductor package / torch.compile (ember)", "aoti_vs_compiled"),
    ("topk package: ATen call by name / C shim", "aoti_dispatcher_vs_shim"),
]


def package(model: nn.Module, args: tuple[torch.Tensor, ...], path: Path) -> Callable[..., object]:
    """`model` exported, compiled into an AOTInductor package at `path`, and loaded."""
    exported = torch.export.export(model, args)
    return torch._inductor.aoti_load_package(
        torch._inductor.aoti_compile_and_package(exported, package_path=str(path))
    )


def measure(repeat: int, results: dict[str, float], mlp: Callable[[], nn.Module]) -> None:
    from torch_ember.compiler import aoti

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder, torch.no_grad():
        model = mlp().to("ember").eval()
        x = torch.randn(64, 256, device="ember")
        loaded = package(model, (x,), Path(folder) / "mlp.pt2")
        compiled = torch.compile(model)
        for _ in range(3):
            loaded(x)
            compiled(x)
        from_package, from_compile = interleaved(
            [synced(lambda: loaded(x)), synced(lambda: compiled(x))], repeat
        )
        results["aoti_vs_compiled"] = ratio(from_package, from_compile)
        results["aoti_mlp_compiled_us"] = median_us(from_compile)

        # topk: an operator Inductor does not generate, cheap on ember (a few microseconds).
        tiny = torch.randn(16, device="ember")
        through_shim = package(TopK(), (tiny,), Path(folder) / "shim.pt2")
        shim_ops = aoti.shim_ops()
        shim_ops.discard("topk")
        try:  # Inductor's caches do not key on the shim's operators: bypassed
            with torch._inductor.config.patch(force_disable_caches=True):
                by_name = package(TopK(), (tiny,), Path(folder) / "by_name.pt2")
            results["aoti_by_name_calls"] = _proxy_calls(Path(folder) / "by_name.pt2")
        finally:
            shim_ops.add("topk")
        for _ in range(3):
            through_shim(tiny)
            by_name(tiny)
        shim, dispatcher = interleaved(
            [synced(lambda: through_shim(tiny)), synced(lambda: by_name(tiny))], repeat
        )
        results["aoti_dispatcher_vs_shim"] = ratio(dispatcher, shim)
        results["aoti_topk_by_name_us"] = median_us(dispatcher)
        results["aoti_topk_shim_us"] = median_us(shim)


def _proxy_calls(path: Path) -> float:
    """How many calls of the package's wrapper go through the proxy executor (by name)."""
    with zipfile.ZipFile(path) as archive:
        sources = [archive.read(n).decode() for n in archive.namelist() if n.endswith(".wrapper.cpp")]
    return float(sum(source.count("aoti_torch_proxy_executor_call_function(") for source in sources))


class TopK(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.topk(x, 2)
        return values, indices
