"""Facts chapter 00 states about the torch 2.13.0 dispatcher and wheel.

The chapter's outputs are checked by nbval; these tests name the claims its prose makes, so a
torch upgrade that changes one of them fails here with a readable message first. Facts that
depend on which modules a process has imported run in a fresh interpreter.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from book.builds import builder
from book.display.widgets import entry

DK = torch._C.DispatchKey
TORCH_DIR = Path(torch.__file__).parent
INCLUDE = TORCH_DIR / "include"


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


def registered(op: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op, key)


def computed(op: str, key: str) -> bool:
    return torch._C._dispatch_has_computed_kernel_for_dispatch_key(op, key)


def fresh_interpreter(script: str) -> dict:
    """Run `script` in a new interpreter (only torch imported by it) and return the JSON it prints."""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


class LogCalls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: tuple[type, ...],
        args: tuple[object, ...] = (),
        kwargs: dict[str, object] | None = None,
    ) -> object:
        self.calls.append(str(func))
        return func(*args, **(kwargs or {}))


def test_torch_version() -> None:
    assert torch.__version__.split("+")[0] == "2.13.0"


# ---- a lookup that finds nothing --------------------------------------------------------------


def test_sparse_gelu_error() -> None:
    with pytest.raises(NotImplementedError) as raised:
        F.gelu(torch.eye(3).to_sparse())
    message = str(raised.value)
    assert message.startswith("Could not run 'aten::gelu' with arguments from the 'SparseCPU' backend.")
    summary, _, table_text = message.partition("\n\n")
    available = summary.split("only available for these backends: [")[1].rstrip("].").split(", ")
    assert len(available) == 92
    assert "SparseCPU" not in available
    # "available" means a computed entry: CUDA is listed on the CPU wheel.
    assert {"CPU", "Meta", "PrivateUse1", "CUDA", "SparseCsrCPU"} <= set(available)
    # The table in the message is exactly the computed dispatch table.
    assert table_text.strip() == torch._C._dispatch_dump_table("aten::gelu").strip()
    rows = table("aten::gelu")
    assert rows["CPU"].endswith("[kernel]")
    assert rows["PrivateUse1"].endswith("[default backend kernel]")
    assert rows["CUDA"] == rows["PrivateUse1"]
    assert "RegisterCompositeExplicitAutogradNonFunctional" in rows["PrivateUse1"]
    assert rows["AutogradCPU"].endswith("[autograd kernel]")
    assert rows["ADInplaceOrView"].startswith("fallthrough") and rows["ADInplaceOrView"].endswith(
        "[backend fallback]"
    )


def test_gelu_table_as_the_widget_reads_it() -> None:
    labels = {
        op: [
            entry(op, key).label for key in ["SparseCPU", "CPU", "AutogradCPU", "PrivateUse1", "CUDA", "Meta"]
        ]
        for op in ["aten::gelu", "aten::gelu_", "aten::gelu.out"]
    }
    assert labels == {
        "aten::gelu": ["—", "kernel", "Autograd", "CEA-NF", "CEA-NF", "kernel"],
        "aten::gelu_": ["—", "kernel", "Autograd", "CEA-NF", "CEA-NF", "kernel"],
        "aten::gelu.out": ["—", "kernel", "Autograd", "—", "—", "kernel"],
    }


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


# ---- probing, NotImplementedError ---------------------------------------------------------------


def test_registered_versus_computed() -> None:
    assert registered("aten::mm", "SparseCPU") and computed("aten::mm", "SparseCPU")
    assert not registered("aten::sigmoid", "SparseCPU") and not computed("aten::sigmoid", "SparseCPU")
    # Derived entries: no registration at the key, but a computed entry.
    assert not registered("aten::gelu", "PrivateUse1") and computed("aten::gelu", "PrivateUse1")
    assert not registered("aten::linear", "SparseCPU") and computed("aten::linear", "SparseCPU")
    # The registration probe sees alias-key registrations under the alias's own name.
    assert registered("aten::gelu", "CompositeExplicitAutogradNonFunctional")

    sparse = torch.eye(3).to_sparse()
    assert torch.mm(sparse, torch.ones(3, 2)).tolist() == [[1.0, 1.0]] * 3
    assert F.linear(sparse, torch.ones(2, 3)).tolist() == [[1.0, 1.0]] * 3
    with pytest.raises(
        NotImplementedError, match="Could not run 'aten::sigmoid' with arguments from the 'SparseCPU'"
    ):
        torch.sigmoid(sparse)


def test_not_implemented_error_is_a_runtime_error() -> None:
    assert NotImplementedError.__mro__[:3] == (NotImplementedError, RuntimeError, Exception)
    sparse = torch.eye(3).to_sparse()
    with pytest.raises(RuntimeError) as caught:
        torch.sigmoid(sparse)
    assert type(caught.value) is NotImplementedError
    # A plain TORCH_CHECK failure is a RuntimeError and not a NotImplementedError.
    with pytest.raises(RuntimeError) as caught:
        torch.ones(2) + torch.ones(3)
    assert type(caught.value) is RuntimeError
    assert str(caught.value).startswith("The size of tensor a (2) must match the size of tensor b (3)")


# ---- what the wheel holds --------------------------------------------------------------------------

_REGISTRY_SCRIPT = r"""
import json, sys
import torch
from torch.utils._python_dispatch import TorchDispatchMode

def cuda_kernels():
    found = {}
    for op in torch._C._dispatch_get_all_op_names():
        if torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA"):
            line = next(l for l in torch._C._dispatch_dump(op).splitlines() if l.startswith("CUDA:"))
            found[op] = line.split(" :: ")[0]
    return found

class Quiet(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))

before = {"ops": len(torch._C._dispatch_get_all_op_names()), "cuda": cuda_kernels(),
          "dynamo": "torch._dynamo" in sys.modules}
with Quiet():
    pass
entered = "torch._dynamo" in sys.modules
with Quiet():
    torch.ones(2) + 1
after = {"ops": len(torch._C._dispatch_get_all_op_names()), "cuda": cuda_kernels(),
         "dynamo": "torch._dynamo" in sys.modules, "fsdp": "torch.distributed.fsdp" in sys.modules}
print(json.dumps({"before": before, "entered": entered, "after": after}))
"""


@pytest.fixture(scope="module")
def registry_state() -> dict:
    """Kernels registered at CUDA in a fresh interpreter, before and after a dispatch mode's first call."""
    return fresh_interpreter(_REGISTRY_SCRIPT)


def test_cuda_column_on_the_cpu_wheel(registry_state: dict) -> None:
    assert not torch.backends.cuda.is_built()
    assert not list((TORCH_DIR / "lib").glob("*cuda*"))
    state = registry_state
    before = state["before"]
    assert before["ops"] == 3598
    cuda = before["cuda"]
    assert len(cuda) == 21
    c10d = {op for op in cuda if op.startswith("c10d::")}
    assert len(c10d) == 19
    assert all("torch/csrc/distributed/c10d/Ops.cpp" in cuda[op] for op in c10d)
    assert set(cuda) - c10d == {"aten::_foreach_mm", "_native::_foreach_mm_native_0"}
    assert all("torch/_native/registry.py" in cuda[op] for op in set(cuda) - c10d)
    assert [op for op in cuda if op.startswith("aten::")] == ["aten::_foreach_mm"]
    devices = ["CPU", "CUDA", "Meta", "PrivateUse1", "XPU"]
    assert [k for k in devices if registered("c10d::allreduce_", k)] == ["CPU", "CUDA", "Meta", "PrivateUse1"]


def test_first_dispatch_mode_call_imports_dynamo_and_registers_operators(registry_state: dict) -> None:
    state = registry_state
    before, after = state["before"], state["after"]
    assert not before["dynamo"] and not state["entered"]
    assert after["dynamo"] and after["fsdp"]
    assert after["ops"] - before["ops"] == 41
    added = set(after["cuda"]) - set(before["cuda"])
    assert len(after["cuda"]) == 33
    assert {op.split("::")[0] for op in added} == {"symm_mem", "fsdp", "_inductor_test"}
    assert all(re.search(r"torch/(distributed|_inductor)/", after["cuda"][op]) for op in added)


def test_cuda_and_privateuse1_columns() -> None:
    for op, expected in [
        ("aten::add.Tensor", "CEA-NF"),
        ("aten::mm", "CEA-NF"),
        ("aten::add.out", "—"),
        ("aten::empty.memory_format", "—"),
    ]:
        assert entry(op, "CUDA").label == expected, op
        assert entry(op, "PrivateUse1").label == expected, op
        assert entry(op, "AutogradCUDA").label == "Autograd", op
        assert entry(op, "AutogradPrivateUse1").label == "Autograd", op


# ---- schema, signature, stub ---------------------------------------------------------------------


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
    assert str(torch.ops.aten.add.t._schema) == "aten::add.t(t[] a, t[] b) -> t[]"
    assert str(torch.ops.aten.add.Tensor._schema) == (
        "aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor"
    )
    assert str(torch.ops.aten.add.out._schema) == (
        "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)"
    )
    assert torch.ops.aten.add_.Tensor._schema.is_mutable
    assert not torch.ops.aten.add.Tensor._schema.is_mutable
    assert "RegisterSchema.cpp" in torch._C._dispatch_dump("aten::add.Tensor").splitlines()[2]


def test_python_scalar_add_uses_tensor_overload() -> None:
    ones = torch.ones(2)
    with LogCalls() as log:
        torch.add(ones, 1)
    assert log.calls == ["aten.add.Tensor"]


def declaration(name: str) -> str:
    lines = (INCLUDE / "ATen" / "RegistrationDeclarations.h").read_text().splitlines()
    return next(line for line in lines if f'"schema": "{name}(' in line)


def test_signatures_from_the_wheel() -> None:
    assert not list(TORCH_DIR.rglob("native_functions.yaml"))
    assert declaration("aten::add.out") == (
        "at::Tensor & add_out(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha, "
        'at::Tensor & out); // {"schema": "aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, '
        'Tensor(a!) out) -> Tensor(a!)", "dispatch": "True", "default": "False"}'
    )
    assert declaration("aten::add.Tensor").startswith(
        "at::Tensor add(const at::Tensor & self, const at::Tensor & other, const at::Scalar & alpha); //"
    )
    assert declaration("aten::add.Tensor").endswith('"dispatch": "True", "default": "True"}')
    assert declaration("aten::abs.out").startswith(
        "at::Tensor & abs_out(const at::Tensor & self, at::Tensor & out);"
    )
    assert declaration("aten::abs.out").endswith('"default": "False"}')
    assert declaration("aten::sigmoid.out").startswith(
        "at::Tensor & sigmoid_out(const at::Tensor & self, at::Tensor & out);"
    )
    ops_header = (INCLUDE / "ATen" / "ops" / "add_ops.h").read_text()
    add_out = ops_header[ops_header.index("struct TORCH_API add_out {") :]
    assert (
        "using schema = at::Tensor & (const at::Tensor &, const at::Tensor &, const at::Scalar &, at::Tensor &);"
        in add_out.split("};")[0]
    )
    # The public C++ API puts `out` first; the kernel signature puts it last.
    assert (
        "inline at::Tensor & add_out(at::Tensor & out, const at::Tensor & self, const at::Tensor & other, "
        "const at::Scalar & alpha=1) {" in (INCLUDE / "ATen" / "ops" / "add.h").read_text()
    )


def test_registration_flags_predict_the_privateuse1_column() -> None:
    flags = re.compile(
        r'"schema": "(?P<name>[^(]+)\(.*"dispatch": "(?P<dispatch>\w+)", "default": "(?P<default>\w+)"'
    )
    counts: dict[tuple[str, str, bool], int] = {}
    default_false: set[str] = set()
    for line in (INCLUDE / "ATen" / "RegistrationDeclarations.h").read_text().splitlines():
        if match := flags.search(line):
            group = (match["dispatch"], match["default"], computed(match["name"], "PrivateUse1"))
            counts[group] = counts.get(group, 0) + 1
            if match["default"] == "False":
                default_false.add(match["name"])
    assert counts == {
        ("False", "True", True): 732,
        ("True", "False", False): 858,
        ("True", "True", True): 1511,
    }
    assert {"aten::add.out", "aten::abs.out", "aten::gelu.out", "aten::empty.memory_format"} <= default_false


def test_dispatch_stubs_in_the_headers() -> None:
    native = INCLUDE / "ATen" / "native"
    unary = (native / "UnaryOps.h").read_text().splitlines()
    binary = (native / "BinaryOps.h").read_text().splitlines()
    assert unary[15] == "using unary_fn = void(*)(TensorIteratorBase&);"
    assert unary[26] == "DECLARE_DISPATCH(unary_fn, abs_stub)"
    assert unary[67] == "DECLARE_DISPATCH(unary_fn, sigmoid_stub)"
    assert (
        binary[46] == "using structured_binary_fn_alpha = void(*)(TensorIteratorBase&, const Scalar& alpha);"
    )
    assert binary[58] == "DECLARE_DISPATCH(structured_binary_fn_alpha, add_stub)"
    assert "#define REGISTER_PRIVATEUSE1_DISPATCH(name, fn)" in (native / "DispatchStub.h").read_text()


def test_sigmoid_exercise() -> None:
    assert computed("aten::sigmoid", "PrivateUse1") and computed("aten::sigmoid_", "PrivateUse1")
    assert not computed("aten::sigmoid.out", "PrivateUse1")
    assert entry("aten::sigmoid", "PrivateUse1").label == "CEA-NF"


# ---- key sets and TLS ------------------------------------------------------------------------------


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
    with torch.autocast("cpu"):
        assert str(torch._C._dispatch_tls_local_exclude_set()) == "DispatchKeySet({})".format(
            autocast_keys.removeprefix("AutocastCPU, ")
        )
        assert (
            call_key_set(t) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView, AutogradCPU, AutocastCPU)"
        )
    with torch.inference_mode():
        assert not torch.is_grad_enabled()
        assert str(torch._C._dispatch_tls_local_include_set()) == "DispatchKeySet(BackendSelect)"
        excluded = torch._C._dispatch_tls_local_exclude_set()
        assert str(excluded) == f"DispatchKeySet(AutogradOther, AutogradNestedTensor, {autocast_keys})"
        assert call_key_set(t) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"
        frozen = torch.ones(2)
    assert keys_of(frozen) == "DispatchKeySet(CPU, AutocastCPU)"
    assert call_key_set(frozen) == "DispatchKeySet(CPU, BackendSelect, ADInplaceOrView)"


def test_normal_tensor_inplace_in_inference_mode_bumps_version() -> None:
    normal = torch.zeros(2)
    with torch.inference_mode():
        normal.add_(1)
    assert normal._version == 1


# ---- reading a table ---------------------------------------------------------------------------------


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
    assert empty["AutogradPrivateUse1"].endswith("[autograd kernel]")

    inplace = table("aten::add_.Tensor")
    assert "ADInplaceOrViewType" in inplace["ADInplaceOrView"] and inplace["ADInplaceOrView"].endswith(
        "[kernel]"
    )
    assert table("aten::add.out")["ADInplaceOrView"].endswith("[kernel]")


def test_add_row_across_functionality_keys() -> None:
    keys = [
        "FuncTorchBatched", "AutocastCPU", "AutogradCPU", "ADInplaceOrView", "Conjugate", "Functionalize",
        "Python", "BackendSelect", "CPU", "SparseCPU", "Meta",
    ]  # fmt: skip
    labels = [entry("aten::add.Tensor", key).label for key in keys]
    assert labels == [
        "kernel", "fallthrough", "Autograd", "fallthrough", "fallback", "fallback",
        "fallback", "fallthrough", "kernel", "kernel", "kernel",
    ]  # fmt: skip
    # The keys before the backend keys are listed from the highest priority to the lowest.
    ordered = torch._C.DispatchKeySet(DK.CPU)
    for key in keys:
        ordered = ordered | torch._C.DispatchKeySet(getattr(DK, key))
    printed = str(ordered).removeprefix("DispatchKeySet(").removesuffix(")").split(", ")  # lowest first
    assert [k for k in reversed(printed) if k in keys[:8]] == keys[:8]
    assert "ConjugateFallback.cpp" in table("aten::add.Tensor")["Conjugate"]


def test_registrations_stack_per_key() -> None:
    def metas() -> list[str]:
        return [
            line.split(" :: ")[0]
            for line in torch._C._dispatch_dump("aten::add.Tensor").splitlines()
            if line.startswith("Meta")
        ]

    before = metas()
    assert len(before) == 2 and "_meta_registrations.py" in before[0] and "(inactive)" in before[1]
    override = torch.library.Library("aten", "IMPL")
    try:
        override.impl("add.Tensor", lambda a, b, alpha=1: torch.empty_like(a), "Meta")
        during = metas()
        assert len(during) == 3 and during[0].startswith("Meta: registered at")
        assert during[1] == before[0].replace("Meta:", "Meta (inactive):")
    finally:
        override._destroy()
    assert metas() == before


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


# ---- one call, several kernels -----------------------------------------------------------------------


@pytest.fixture
def scale_op() -> Iterator[tuple[torch._ops.OpOverload, list[str]]]:
    seen: list[str] = []
    lib = torch.library.Library("ch00_facts", "DEF")
    lib.define("scale(Tensor x) -> Tensor")
    op = torch.ops.ch00_facts.scale.default

    def autograd_kernel(keys: torch._C.DispatchKeySet, x: torch.Tensor) -> torch.Tensor:
        seen.append(f"Autograd {keys} grad={torch.is_grad_enabled()}")
        return op.redispatch(keys & torch._C._after_autograd_keyset, x)

    def cpu_kernel(keys: torch._C.DispatchKeySet, x: torch.Tensor) -> torch.Tensor:
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
    assert seen == ["Autograd DispatchKeySet(CPU, AutogradCPU) grad=True", "CPU DispatchKeySet(CPU)"]
    seen.clear()
    with torch.no_grad():
        op(torch.ones(2))
    # no_grad does not skip the autograd kernel; it runs with grad mode off.
    assert seen == ["Autograd DispatchKeySet(CPU, AutogradCPU) grad=False", "CPU DispatchKeySet(CPU)"]
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


# ---- checkpoint ----------------------------------------------------------------------------------------


def test_filling_the_sparse_gelu_entry_fixes_the_call() -> None:
    x = torch.eye(3).to_sparse()

    def sparse_gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
        x = x.coalesce()
        values = F.gelu(x.values(), approximate=approximate)
        return torch.sparse_coo_tensor(
            x.indices(), values, x.shape, is_coalesced=True, check_invariants=False
        )

    lib = torch.library.Library("aten", "IMPL")
    try:
        lib.impl("gelu", sparse_gelu, "SparseCPU")
        assert registered("aten::gelu", "SparseCPU")
        y = F.gelu(x)
        assert y.layout == torch.sparse_coo
        assert torch.equal(y.to_dense(), F.gelu(x.to_dense()))
        with pytest.raises(NotImplementedError, match="Could not run 'aten::gelu_'"):
            torch.ops.aten.gelu_(x.clone())
    finally:
        lib._destroy()
    assert not registered("aten::gelu", "SparseCPU")
    with pytest.raises(
        NotImplementedError, match="Could not run 'aten::gelu' with arguments from the 'SparseCPU'"
    ):
        F.gelu(x)


# ---- exercises and appendices -----------------------------------------------------------------------------


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
        # The instance owns __test__::foo: a second one cannot define it again.
        with pytest.raises(RuntimeError, match="Tried to register an operator .* multiple times"):
            PythonDispatcher()
    finally:
        del dispatcher

    for registrations, autograd_cpu in [
        (["CompositeExplicitAutograd"], "[backend fallback]"),
        (["CompositeExplicitAutograd", "Autograd"], "fn_Autograd [autograd kernel]"),
    ]:
        dispatcher = PythonDispatcher()
        try:
            dispatcher.register(registrations)
            rows = {line.split()[0]: line for line in dispatcher.dispatchTable().splitlines()[4:] if line}
            assert "fn_CompositeExplicitAutograd [default backend kernel]" in rows["CPU"]
            assert rows["AutogradCPU"].split(None, 1)[1] == autograd_cpu
            assert rows["AutogradXLA"].split(None, 1)[1] == autograd_cpu
        finally:
            del dispatcher
    assert torch._C._get_autograd_fallback_mode() == "warn"


def test_explicit_composite_backward_warns() -> None:
    lib = torch.library.Library("ch00_fallback", "DEF")
    try:
        lib.define("twice(Tensor x) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CompositeExplicitAutograd")
        x = torch.ones(2, requires_grad=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.ops.ch00_fallback.twice(x).sum().backward()
        assert any(
            "ch00_fallback::twice: an autograd kernel was not registered to the Autograd key(s) but we are "
            "trying to backprop through it" in str(w.message)
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
    header = INCLUDE / "ATen" / "core" / "dispatch" / "Dispatcher.h"
    lines = header.read_text().splitlines()
    points = [i for i, line in enumerate(lines) if "if (show_dispatch_trace())" in line]
    assert len(points) == 4
    assert all("HAS_TORCH_SHOW_DISPATCH_TRACE" in lines[i - 2] for i in points)
    assert "-DNDEBUG" in torch.__config__.show()


# ---- installed headers the chapter cites ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "text"),
    [
        ("ATen/core/dispatch/Dispatcher.h", "// do not use RecordFunction on redispatch"),
        (
            "ATen/core/dispatch/DispatchKeyExtractor.h",
            "return (((ks | local.included_) - local.excluded_) & key_mask);",
        ),
        ("ATen/core/dispatch/DispatchKeyExtractor.h", "DispatchKeySet nonFallthroughKeys_;"),
        (
            "ATen/core/LegacyTypeDispatch.h",
            "dispatch_key_guard_(c10::autograd_dispatch_keyset_with_ADInplaceOrView)",
        ),
        ("c10/core/DispatchKeySet.h", "uint64_t repr_ = 0;"),
        (
            "c10/core/DispatchKeySet.h",
            "constexpr DispatchKeySet autograd_dispatch_keyset = DispatchKeySet({\n    DispatchKey::AutogradFunctionality,",
        ),
        ("c10/core/TensorImpl.h", "DispatchKeySet key_set_;"),
        ("c10/core/DispatchKey.h", "// Alias keys won't be directly called during runtime."),
        (
            "c10/core/DispatchKey.h",
            "// 2. For view ops this kernel does `as_view` setup where we properly setup",
        ),
        (
            "c10/core/TensorImpl.h",
            '"Inplace update to inference tensor outside InferenceMode is not allowed."',
        ),
        ("c10/core/InferenceMode.h", "// Note [Expected TLS state in InferenceMode]:"),
        ("c10/core/InferenceMode.h", "/* grad_mode */ !enabled,"),
        (
            "c10/util/Exception.h",
            "#define TORCH_CHECK_NOT_IMPLEMENTED(cond, ...) \\\n  TORCH_CHECK_WITH_MSG(NotImplementedError",
        ),
        ("torch/csrc/Exceptions.h", "NotImplementedError, PyExc_NotImplementedError, retstmnt"),
        ("ATen/native/MathBitsFallback.h", "Conjugate bit is set on a tensor when `.conj()` is called"),
    ],
)
def test_cited_header_text(header: str, text: str) -> None:
    assert text in (INCLUDE / header).read_text()
