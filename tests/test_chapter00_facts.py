"""Facts chapter 00 states about the torch 2.13.0 dispatcher.

The chapter's outputs are checked by nbval; these tests name the claims its prose makes, so a
torch upgrade that changes one of them fails here with a readable message first.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from book import builder

DK = torch._C.DispatchKey


@pytest.fixture(autouse=True, scope="module")
def plain_torch() -> None:
    """These are facts about PyTorch itself: no ember build may be loaded (other test
    modules in this process load them)."""
    builder.unload()


def table(op: str) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in torch._C._dispatch_dump_table(op).strip().splitlines())


def keys_of(t: torch.Tensor) -> str:
    return str(torch._C._dispatch_keys(t))


def call_key_set(t: torch.Tensor) -> str:
    keys = torch._C._dispatch_keys(t) | torch._C._dispatch_tls_local_include_set()
    return str(keys - torch._C._dispatch_tls_local_exclude_set())


class LogCalls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def test_torch_version() -> None:
    assert torch.__version__.split("+")[0] == "2.13.0"


def test_sparse_gelu_error() -> None:
    with pytest.raises(NotImplementedError) as raised:
        F.gelu(torch.eye(3).to_sparse())
    message = str(raised.value)
    assert message.startswith("Could not run 'aten::gelu' with arguments from the 'SparseCPU' backend.")
    summary, _, table_text = message.partition("\n\n")
    available = summary.split("only available for these backends: [")[1].rstrip("].").split(", ")
    assert "SparseCPU" not in available
    assert {"CPU", "Meta", "PrivateUse1", "SparseCsrCPU"} <= set(available)
    # The table in the message is exactly the computed dispatch table.
    assert table_text.strip() == torch._C._dispatch_dump_table("aten::gelu").strip()
    rows = table("aten::gelu")
    assert rows["CPU"].endswith("[kernel]")
    assert rows["PrivateUse1"].endswith("[default backend kernel]")
    assert "RegisterCompositeExplicitAutogradNonFunctional" in rows["PrivateUse1"]
    assert rows["AutogradCPU"].endswith("[autograd kernel]")
    assert rows["ADInplaceOrView"].startswith("fallthrough") and rows["ADInplaceOrView"].endswith(
        "[backend fallback]"
    )


def test_alias_coverage() -> None:
    def included(key: str, alias: str) -> bool:
        return torch._C._dispatch_is_included_in_alias(getattr(DK, key), getattr(DK, alias))

    non_functional = "CompositeExplicitAutogradNonFunctional"
    assert included("PrivateUse1", non_functional) and included("SparseCsrCPU", non_functional)
    assert not any(included(k, non_functional) for k in ["SparseCPU", "XLA", "Lazy"])
    assert all(included(k, "CompositeExplicitAutograd") for k in ["CPU", "PrivateUse1", "SparseCPU", "XLA"])
    assert not included("AutogradPrivateUse1", "CompositeExplicitAutograd")
    assert included("AutogradPrivateUse1", "CompositeImplicitAutograd")
    assert included("AutogradPrivateUse1", "Autograd")


def test_default_backend_gelu_calls_allocation_and_out() -> None:
    kernel = torch._C._dispatch_get_computed_kernel_for_dispatch_key("aten::gelu", "PrivateUse1")
    dense = torch.randn(4)
    with LogCalls() as log:
        result = kernel.call_boxed(torch._C.DispatchKeySet(DK.CPU), dense, approximate="none")
    assert log.calls == ["aten.empty.memory_format", "aten.gelu.out"]
    assert torch.equal(result, F.gelu(dense))
    transposed = torch.randn(4, 3).t()
    with LogCalls() as log:
        kernel.call_boxed(torch._C.DispatchKeySet(DK.CPU), transposed, approximate="none")
    assert log.calls == ["aten.empty_strided.default", "aten.gelu.out"]


def test_add_overloads() -> None:
    overloads = torch.ops.aten.add.overloads()
    assert len(overloads) == 16
    in_dispatcher = set(torch._C._dispatch_get_all_op_names())
    names = ["aten::add" if o == "default" else f"aten::add.{o}" for o in overloads]
    assert [n for n in names if n in in_dispatcher] == [
        "aten::add.Tensor",
        "aten::add.Scalar",
        "aten::add.out",
        "aten::add.Scalar_out",
    ]
    assert str(torch.ops.aten.add.Tensor._schema) == (
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    )
    assert str(torch.ops.aten.add.out._schema) == (
        "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
    )
    assert torch.ops.aten.add_.Tensor._schema.is_mutable
    assert not torch.ops.aten.add.Tensor._schema.is_mutable


def test_python_scalar_add_uses_tensor_overload() -> None:
    ones = torch.ones(2)
    with LogCalls() as log:
        torch.add(ones, 1)
    assert log.calls == ["aten.add.Tensor"]


def test_tensor_key_sets() -> None:
    plain = "DispatchKeySet(CPU, ADInplaceOrView, AutogradCPU, AutocastCPU)"
    assert keys_of(torch.ones(2)) == plain
    assert keys_of(torch.ones(2, requires_grad=True)) == plain  # requires_grad is not a key
    assert (
        keys_of(torch.eye(3).to_sparse())
        == "DispatchKeySet(SparseCPU, ADInplaceOrView, AutogradCPU, AutocastCPU)"
    )
    assert keys_of(torch.empty(2, device="meta")) == "DispatchKeySet(Meta, ADInplaceOrView, AutogradMeta)"
    conj = torch.ones(2, dtype=torch.complex64).conj()
    assert keys_of(conj) == "DispatchKeySet(CPU, Conjugate, ADInplaceOrView, AutogradCPU, AutocastCPU)"
    assert torch._C._dispatch_keys(torch.ones(2)).highestPriorityTypeId() == DK.AutocastCPU


def test_tls_sets() -> None:
    autocast_keys = (
        "AutocastCPU, AutocastMTIA, AutocastMAIA, AutocastXPU, AutocastIPU, AutocastHPU, AutocastXLA, "
        "AutocastMPS, AutocastCUDA, AutocastPrivateUse1"
    )
    default_include = "DispatchKeySet(BackendSelect, ADInplaceOrView)"
    assert str(torch._C._dispatch_tls_local_include_set()) == default_include
    assert str(torch._C._dispatch_tls_local_exclude_set()) == f"DispatchKeySet({autocast_keys})"
    t = torch.ones(2)
    assert call_key_set(t) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU)"
    with torch.no_grad():
        assert str(torch._C._dispatch_tls_local_include_set()) == default_include
        assert str(torch._C._dispatch_tls_local_exclude_set()) == f"DispatchKeySet({autocast_keys})"
    with torch.inference_mode():
        assert str(torch._C._dispatch_tls_local_include_set()) == "DispatchKeySet(BackendSelect)"
        excluded = torch._C._dispatch_tls_local_exclude_set()
        assert str(excluded) == f"DispatchKeySet(AutogradOther, AutogradNestedTensor, {autocast_keys})"
        assert call_key_set(t) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"
        frozen = torch.ones(2)
    assert keys_of(frozen) == "DispatchKeySet(CPU, AutocastCPU)"
    assert call_key_set(frozen) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"


def test_table_entries() -> None:
    add = table("aten::add.Tensor")
    assert add["PrivateUse1"].endswith("[default backend kernel]")
    assert add["AutogradPrivateUse1"].endswith("[autograd kernel]")
    assert add["BackendSelect"].startswith("fallthrough")
    assert add["ADInplaceOrView"].startswith("fallthrough")
    assert add["AutocastCPU"].startswith("fallthrough")
    assert "_meta_registrations.py" in add["Meta"]
    dump = torch._C._dispatch_dump("aten::add.Tensor")
    assert "Meta (inactive): registered at" in dump
    assert "Autograd[alias]" in dump and "CompositeExplicitAutogradNonFunctional[alias]" in dump

    linear = table("aten::linear")
    for key in ["CPU", "PrivateUse1", "Meta", "AutogradCPU", "AutogradPrivateUse1"]:
        assert linear[key].endswith("[math kernel]"), key
    assert linear["AutogradNestedTensor"].endswith("[autograd kernel]")

    empty = table("aten::empty.memory_format")
    assert "PrivateUse1" not in empty
    assert empty["BackendSelect"].endswith("[kernel]")

    inplace = table("aten::add_.Tensor")
    assert "ADInplaceOrViewType" in inplace["ADInplaceOrView"] and inplace["ADInplaceOrView"].endswith(
        "[kernel]"
    )


@pytest.fixture
def scale_op() -> Iterator[tuple[torch._ops.OpOverload, list[str]]]:
    seen: list[str] = []
    lib = torch.library.Library("ch00_facts", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    op = torch.ops.ch00_facts.scale.default

    def autograd_kernel(keys, x):
        seen.append(f"Autograd {keys}")
        return op.redispatch(keys & torch._C._after_autograd_keyset, x)

    def cpu_kernel(keys, x):
        seen.append(f"CPU {keys}")
        return x * 2

    lib.impl("scale", autograd_kernel, "Autograd", with_keyset=True)
    lib.impl("scale", cpu_kernel, "CPU", with_keyset=True)
    yield op, seen
    lib._destroy()


def test_redispatch_key_sets(scale_op: tuple[torch._ops.OpOverload, list[str]]) -> None:
    op, seen = scale_op
    op(torch.ones(2))
    # Fallthrough and excluded keys are masked out before the first kernel sees the set.
    assert seen == ["Autograd DispatchKeySet(CPU, AutogradCPU)", "CPU DispatchKeySet(CPU)"]
    seen.clear()
    with torch.inference_mode():
        op(torch.ones(2))
    assert seen == ["CPU DispatchKeySet(CPU)"]


def test_version_counter_and_inference_inplace() -> None:
    v = torch.zeros(2)
    v.add_(1)
    assert v._version == 1
    with torch.inference_mode():
        frozen = torch.zeros(2)
    with pytest.raises(
        RuntimeError, match="Inplace update to inference tensor outside InferenceMode is not allowed"
    ):
        frozen.add_(1)
    # ADInplaceOrView checks on the way back up: the CPU kernel has already written.
    assert torch.equal(frozen, torch.ones(2))


def test_python_dispatcher() -> None:
    from torch._python_dispatcher import PythonDispatcher

    dispatcher = PythonDispatcher()
    try:
        assert dispatcher.keys() == [
            "CPU", "AutogradCPU", "FPGA", "AutogradOther", "XLA", "AutogradXLA", "Lazy", "AutogradLazy",
            "CompositeExplicitAutograd", "Autograd", "CompositeImplicitAutograd",
        ]  # fmt: skip
        dispatcher.register(["CPU", "XLA", "AutogradCPU", "CompositeImplicitAutograd"])
        rows = {line.split()[0]: line for line in dispatcher.dispatchTable().splitlines()[4:] if line}
        assert rows["AutogradXLA"].split(None, 1)[1] == "[backend fallback]"
        assert "fn_CompositeImplicitAutograd [math kernel]" in rows["AutogradLazy"]
        assert "fn_AutogradCPU [kernel]" in rows["AutogradCPU"]
        assert "fn_CompositeImplicitAutograd [math kernel]" in rows["FPGA"]
        assert callable(dispatcher.rawRegistrations)
    finally:
        del dispatcher

    dispatcher = PythonDispatcher()
    try:
        dispatcher.register(["CompositeExplicitAutograd"])
        rows = {line.split()[0]: line for line in dispatcher.dispatchTable().splitlines()[4:] if line}
        assert "[default backend kernel]" in rows["CPU"]
        assert rows["AutogradCPU"].split(None, 1)[1] == "[backend fallback]"
    finally:
        del dispatcher
    assert torch._C._get_autograd_fallback_mode() == "warn"


def test_autograd_fallback_warning_text() -> None:
    lib = torch.library.Library("ch00_fallback", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        x = torch.ones(2, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.ops.ch00_fallback.twice(x).sum().backward()
        assert any(
            "an autograd kernel was not registered to the Autograd key(s) but we are trying to backprop through it"
            in str(w.message)
            for w in caught
        )
    finally:
        lib._destroy()


def test_show_dispatch_trace_is_silent_on_release_wheel() -> None:
    probe = "import torch; a = torch.ones(2); torch.add(a, a)"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "TORCH_SHOW_DISPATCH_TRACE": "1"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert (result.stdout, result.stderr) == ("", "")
    header = Path(torch.__file__).parent / "include" / "ATen" / "core" / "dispatch" / "Dispatcher.h"
    lines = header.read_text().splitlines()
    points = [i for i, line in enumerate(lines) if "if (show_dispatch_trace())" in line]
    assert len(points) == 4
    assert all("HAS_TORCH_SHOW_DISPATCH_TRACE" in lines[i - 2] for i in points)
    assert "-DNDEBUG" in torch.__config__.show()
