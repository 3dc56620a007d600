"""book.trace shows the key path the dispatcher really takes (torch 2.13), checked against the dispatcher itself.

Each case pins the keys a call visits, written out by hand from the documented
rules (an autograd kernel redispatches with ``ks & c10::after_autograd_keyset``,
an ADInplaceOrView kernel with ``ks & c10::after_ADInplaceOrView_keyset``, a
fallthrough is masked out before the lookup), and then asks the dispatcher,
without the code under test:

* where the call enters: ``torch._ops.key_extractor`` (PyTorch's own Python
  mirror of DispatchKeyExtractor: tensors' keys | TLS included − TLS excluded)
  and the first key in priority order whose computed-table entry is not a
  fallthrough;
* the key set the dispatcher hands a kernel: a spy kernel registered from
  Python (``torch.library``, ``with_keyset=True``) at a key on the path
  receives it. A spy at the entry key sees the call's key set; a spy at the
  final key sees what the real kernels above it redispatched with;
* that a key is never visited: a spy there is never called (``AutogradCPU``
  for a copy into an ember or meta tensor from a CPU tensor, where the old
  trace claimed ``AutogradPrivateUse1 → AutogradCPU → ADInplaceOrView``);
* side effects of the kernels that ran: the version counter moves once per
  ADInplaceOrView visit, autograd records one node per autograd kernel.
"""

from __future__ import annotations

import gc
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

import book
from book.builds import builder
from book.display.widgets import dispatch_trace as tr
from book.run.chapter import Chapter

EMBER = "privateuseone"
DK = torch._C.DispatchKey


@pytest.fixture(scope="module")
def ember() -> Iterator[builder.Build]:
    """The backend as chapter 03 leaves it: minimal operators and the CPU fallback."""
    gc.collect()
    yield Chapter.of("fallback").build()
    gc.collect()


# ---- the dispatcher's own answers, independent of book.display.widgets ---------------------------


def key_names(keys: torch._C.DispatchKeySet) -> list[str]:
    """Runtime keys of a key set, highest priority first (c10 prints them lowest first)."""
    inside = re.fullmatch(r"DispatchKeySet\((.*)\)", str(keys))
    assert inside is not None
    return [name for name in inside[1].split(", ") if name][::-1]


def fallthrough_keys(op: str) -> set[str]:
    """Keys whose entry in the operator's computed dispatch table is a fallthrough."""
    return {
        line.split(":")[0]
        for line in torch._C._dispatch_dump_table(op).splitlines()
        if ": fallthrough " in line
    }


def reference_entry(op: str, tensors: tuple[torch.Tensor, ...]) -> str:
    """Where Dispatcher::call enters: the highest key of the call's key set that is not a fallthrough."""
    keys = torch._ops.key_extractor(tensors, torch._C._dispatch_keyset_full())
    skipped = fallthrough_keys(op)
    return next(name for name in key_names(keys) if name not in skipped)


def _placeholder_result(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """What a spy at a backend key returns instead of doing the work: the written argument or a new tensor."""
    for index, argument in enumerate(op._schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            return kwargs[argument.name] if argument.name in kwargs else args[index]
    self = args[0]
    if op._schema.returns[0].alias_info is not None:  # a view of self
        return self.as_strided(self.size(), self.stride(), self.storage_offset())
    return torch.empty_like(self)


@contextmanager
def spy(op: torch._ops.OpOverload, key: str) -> Iterator[list[list[str]]]:
    """Register a Python kernel for `op` at `key` that records the key set it is called with.

    At an autograd or ADInplaceOrView key it then does what PyTorch's kernel
    there does with the dispatch keys and the thread-local state (redispatch
    with the after_* mask, below the same guard; no gradient is recorded); at
    any other key it returns a placeholder. The registration is removed on exit.
    """
    seen: list[list[str]] = []

    def kernel(keyset: torch._C.DispatchKeySet, *args: Any, **kwargs: Any) -> Any:
        seen.append(key_names(keyset))
        if key.startswith("Autograd"):
            with torch._C._AutoDispatchBelowAutograd():
                return op.redispatch(keyset & torch._C._after_autograd_keyset, *args, **kwargs)
        if key == "ADInplaceOrView":
            with torch._C._AutoDispatchBelowADInplaceOrView():
                return op.redispatch(keyset & torch._C._after_ADInplaceOrView_keyset, *args, **kwargs)
        return _placeholder_result(op, args, kwargs)

    namespace, name = op.name().split("::")
    library = torch.library.Library(namespace, "IMPL")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # overriding a kernel may warn
            library.impl(name, kernel, key, with_keyset=True)
        yield seen
    finally:
        library._destroy()


# ---- the cases ------------------------------------------------------------------------


def _no_mode() -> AbstractContextManager[object]:
    return nullcontext()


@dataclass
class Case:
    """One call, the keys it must visit, and where the dispatcher must never go."""

    id: str
    op: str  # the top-level call, e.g. "aten::add.Tensor"
    make: Callable[[str], tuple[torch.Tensor, ...]]  # device -> the call's tensor arguments
    run: Callable[..., object]  # the call, on those tensors
    visited: list[str]  # the keys whose kernels run, in order (fallthroughs excluded)
    kernel: str  # Call.kernel of the top-level call
    mode: Callable[[], AbstractContextManager[object]] = _no_mode
    never: list[str] = field(default_factory=list)  # keys a spy proves are not visited
    device: str = "cpu"

    @property
    def overload(self) -> torch._ops.OpOverload:
        namespace, rest = self.op.split("::")
        name, _, overload = rest.partition(".")
        return getattr(getattr(getattr(torch.ops, namespace), name), overload or "default")


def _one(device: str) -> tuple[torch.Tensor, ...]:
    return (torch.arange(3.0).to(device),)


def _pair(device: str) -> tuple[torch.Tensor, ...]:
    return torch.arange(3.0).to(device), torch.ones(3).to(device)


def _pair_grad(device: str) -> tuple[torch.Tensor, ...]:
    a, b = _pair(device)
    return a.requires_grad_(), b


def _triple(device: str) -> tuple[torch.Tensor, ...]:
    return (*_pair(device), torch.empty(3).to(device))


def _inference_pair(device: str) -> tuple[torch.Tensor, ...]:
    with torch.inference_mode():
        return _pair(device)


def _into_device_from_cpu(device: str) -> tuple[torch.Tensor, ...]:
    return torch.zeros(4, 3).to(device)[1], torch.arange(3.0)


CPU_CASES = [
    Case("add", "aten::add.Tensor", _pair, lambda a, b: a + b, ["AutogradCPU", "CPU"], tr.CPU_KERNEL),
    Case(
        "add-requires-grad",
        "aten::add.Tensor",
        _pair_grad,
        lambda a, b: a + b,
        ["AutogradCPU", "CPU"],
        tr.CPU_KERNEL,
    ),
    # no_grad changes GradMode, not the dispatch keys: the autograd kernel still runs and records nothing.
    Case(
        "add-no-grad",
        "aten::add.Tensor",
        _pair_grad,
        lambda a, b: a + b,
        ["AutogradCPU", "CPU"],
        tr.CPU_KERNEL,
        torch.no_grad,
    ),
    # inference_mode excludes the autograd keys in TLS: the call enters at the backend.
    Case(
        "add-inference-mode",
        "aten::add.Tensor",
        _pair,
        lambda a, b: a + b,
        ["CPU"],
        tr.CPU_KERNEL,
        torch.inference_mode,
        never=["AutogradCPU"],
    ),
    Case(
        "add_",
        "aten::add_.Tensor",
        _pair,
        lambda a, b: a.add_(b),
        ["AutogradCPU", "ADInplaceOrView", "CPU"],
        tr.CPU_KERNEL,
    ),
    # A normal tensor still carries ADInplaceOrView in inference mode (its version counter moves); an
    # inference tensor does not.
    Case(
        "add_-inference-mode",
        "aten::add_.Tensor",
        _pair,
        lambda a, b: a.add_(b),
        ["ADInplaceOrView", "CPU"],
        tr.CPU_KERNEL,
        torch.inference_mode,
        never=["AutogradCPU"],
    ),
    Case(
        "add_-inference-tensor",
        "aten::add_.Tensor",
        _inference_pair,
        lambda a, b: a.add_(b),
        ["CPU"],
        tr.CPU_KERNEL,
        torch.inference_mode,
        never=["ADInplaceOrView"],
    ),
    Case(
        "out",
        "aten::add.out",
        _triple,
        lambda a, b, c: torch.add(a, b, out=c),
        ["AutogradCPU", "ADInplaceOrView", "CPU"],
        tr.CPU_KERNEL,
    ),
    Case(
        "view",
        "aten::view",
        _one,
        lambda a: a.view(3),
        ["AutogradCPU", "ADInplaceOrView", "CPU"],
        tr.CPU_KERNEL,
    ),
    Case(
        "select",
        "aten::select.int",
        _one,
        lambda a: a[0],
        ["AutogradCPU", "ADInplaceOrView", "CPU"],
        tr.COMPOSITE_EXPLICIT,
    ),
    # The case without ember: a meta tensor's keys outrank the CPU tensor's, and after the autograd
    # kernel every autograd key is gone: AutogradCPU is never visited.
    Case(
        "copy_-meta-from-cpu",
        "aten::copy_",
        _into_device_from_cpu,
        lambda dst, src: dst.copy_(src),
        ["AutogradMeta", "ADInplaceOrView", "Meta"],
        tr.COMPOSITE_EXPLICIT,
        never=["AutogradCPU"],
        device="meta",
    ),
]

EMBER_CASES = [
    # Chapter 02's trace of copy_ claimed AutogradPrivateUse1 → AutogradCPU → ADInplaceOrView.
    Case(
        "copy_-from-cpu",
        "aten::copy_",
        _into_device_from_cpu,
        lambda dst, src: dst.copy_(src),
        ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT,
        never=["AutogradCPU"],
    ),
    # add.Tensor's PrivateUse1 entry comes from CompositeExplicitAutogradNonFunctional (structured
    # kernels), not CompositeExplicitAutograd.
    Case(
        "add",
        "aten::add.Tensor",
        _pair,
        lambda a, b: a + b,
        ["AutogradPrivateUse1", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT_NF,
    ),
    Case(
        "add-requires-grad",
        "aten::add.Tensor",
        _pair_grad,
        lambda a, b: a + b,
        ["AutogradPrivateUse1", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT_NF,
    ),
    Case(
        "add-no-grad",
        "aten::add.Tensor",
        _pair_grad,
        lambda a, b: a + b,
        ["AutogradPrivateUse1", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT_NF,
        torch.no_grad,
    ),
    Case(
        "add-inference-mode",
        "aten::add.Tensor",
        _pair,
        lambda a, b: a + b,
        ["PrivateUse1"],
        tr.COMPOSITE_EXPLICIT_NF,
        torch.inference_mode,
        never=["AutogradPrivateUse1"],
    ),
    Case(
        "add_",
        "aten::add_.Tensor",
        _pair,
        lambda a, b: a.add_(b),
        ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT_NF,
    ),
    Case(
        "out",
        "aten::add.out",
        _triple,
        lambda a, b, c: torch.add(a, b, out=c),
        ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"],
        tr.BACKEND_FALLBACK,
    ),
    Case(
        "view",
        "aten::view",
        _one,
        lambda a: a.view(3),
        ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"],
        tr.EMBER_KERNEL,
    ),
    Case(
        "select",
        "aten::select.int",
        _one,
        lambda a: a[0],
        ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"],
        tr.COMPOSITE_EXPLICIT,
    ),
]
for _case in EMBER_CASES:
    _case.device = EMBER


def _top_call(trace: tr.Trace, op: str) -> tr.Call:
    calls = [c for c in trace.calls if c.name == op]
    assert len(calls) == 1, [c.name for c in trace.calls]
    return calls[0]


def check_case(case: Case) -> None:
    tensors = case.make(case.device)
    with case.mode():
        call = _top_call(book.trace(lambda: case.run(*tensors)), case.op)
        entry = reference_entry(case.op, tensors)
        with spy(case.overload, call.entered) as at_entry:
            case.run(*tensors)
        with spy(case.overload, case.visited[-1]) as at_final:
            case.run(*tensors)
        never = {}
        for key in case.never:
            with spy(case.overload, key) as hits:
                case.run(*tensors)
            never[key] = hits

    # The pinned path, from the documented rules.
    assert call.visited == case.visited
    assert call.kernel == case.kernel
    # Where the call entered is the dispatcher's choice, computed when the call started; every later step
    # was reached by a redispatch and is marked as inferred from the dispatch table.
    assert entry == case.visited[0]
    steps = [s for s in call.path if s.action != tr.SKIPPED]
    assert [s.inferred for s in steps] == [False] + [True] * (len(steps) - 1)
    assert [s.via for s in steps][:1] == [tr.ENTRY]
    # The key sets the dispatcher handed to the kernels at the first and the last key.
    assert at_entry == [call.keys] and steps[0].keys == tuple(call.keys)
    assert at_final == [list(steps[-1].keys)]
    # Keys the dispatcher never visits.
    assert never == {key: [] for key in case.never}
    for key in case.never:
        assert key not in call.visited


@pytest.mark.parametrize("case", CPU_CASES, ids=lambda c: c.id)
def test_cpu_paths(case: Case) -> None:
    check_case(case)


@pytest.mark.parametrize("case", EMBER_CASES, ids=lambda c: c.id)
def test_ember_paths(case: Case, ember: builder.Build) -> None:
    check_case(case)


# ---- side effects of the kernels that ran ------------------------------------------------


def test_a_spy_at_autograd_cpu_does_see_cpu_only_copies() -> None:
    """The spy works: the same copy_ between two CPU tensors does visit AutogradCPU."""
    dst, src = torch.zeros(3), torch.arange(3.0)
    with spy(torch.ops.aten.copy_.default, "AutogradCPU") as hits:
        dst.copy_(src)
    assert hits == [["AutogradCPU", "ADInplaceOrView", "CPU"]]


def test_copy_into_ember_runs_one_autograd_and_one_inplace_kernel(ember: builder.Build) -> None:
    dst = torch.zeros(3, device=EMBER)
    src = torch.arange(3.0, requires_grad=True)
    version = dst._version
    call = _top_call(book.trace(lambda: dst.copy_(src)), "aten::copy_")
    assert call.visited == ["AutogradPrivateUse1", "ADInplaceOrView", "PrivateUse1"]
    assert call.passed == ["AutogradPrivateUse1", "ADInplaceOrView"]
    # The ADInplaceOrView kernel ran once: one version bump.
    assert dst._version == version + 1
    # One autograd kernel ran: one CopyBackwards, connected straight to src's accumulator.
    assert type(dst.grad_fn).__name__ == "CopyBackwards"
    assert [type(f).__name__ for f, _ in dst.grad_fn.next_functions if f is not None] == ["AccumulateGrad"]


def test_in_place_and_out_bump_the_version_once_and_inference_tensors_have_none() -> None:
    a, b = _pair("cpu")
    c = torch.empty(3)
    before = (a._version, c._version)
    a.add_(b)
    torch.add(a, b, out=c)
    assert (a._version, c._version) == (before[0] + 1, before[1] + 1)
    with torch.inference_mode():
        a.add_(b)  # a normal tensor in inference mode: ADInplaceOrView still runs
        assert a._version == before[0] + 2
        (i,) = _inference_pair("cpu")[:1]
        i.add_(1)
    with pytest.raises(RuntimeError, match="version counter"):
        i._version  # noqa: B018 - inference tensors have no version counter: no ADInplaceOrView kernel


def test_no_grad_keeps_the_autograd_keys_and_inference_mode_excludes_them() -> None:
    # The TLS sets hold functionality bits only: ask for the Autograd functionality, not AutogradCPU.
    autograd = [DK.AutogradFunctionality, DK.AutogradOther, DK.AutogradNestedTensor]
    with torch.no_grad():
        assert not any(torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in autograd)
    with torch.inference_mode():
        assert all(torch._C._dispatch_tls_is_dispatch_key_excluded(k) for k in autograd)
        assert not torch._C._dispatch_tls_is_dispatch_key_included(DK.ADInplaceOrView)


def test_after_autograd_keyset_drops_every_autograd_key() -> None:
    """The documented rule the trace applies, on torch's own DispatchKeySet."""
    keys = torch._C._dispatch_keys(torch.ones(1)) | torch._C._dispatch_keys(torch.ones(1, device="meta"))
    assert [name for name in key_names(keys) if name.startswith("Autograd")] == [
        "AutogradMeta",
        "AutogradCPU",
    ]
    below = keys & torch._C._after_autograd_keyset
    assert not any(name.startswith("Autograd") for name in key_names(below))
    assert key_names(below & torch._C._after_ADInplaceOrView_keyset) == ["Meta", "CPU"]


def test_nested_calls_inside_an_autograd_kernel_carry_no_autograd_key() -> None:
    """A kernel's own calls are observed (RecordFunction): below autograd, TLS excludes the autograd keys."""
    x, w = torch.ones(2, 3), torch.ones(4, 3, requires_grad=True)
    trace = book.trace(lambda: torch.nn.functional.linear(x, w))
    (mm,) = trace.find("aten::mm")
    assert mm.visited == ["AutogradCPU", "CPU"]
    nested = [c for c in mm.walk() if c is not mm]
    assert nested and all(not k.startswith("Autograd") for c in nested for k in c.keys)
    assert all(not s.inferred for c in nested for s in c.path if s.via == tr.ENTRY)


def test_composite_labels_name_the_alias_key_the_kernel_was_registered_at(ember: builder.Build) -> None:
    """The registration listing (torch._C._dispatch_dump) says which alias key a default backend kernel came from."""
    a, b = _pair(EMBER)
    trace = book.trace(lambda: a + b)
    (add,) = trace.find("aten::add.Tensor")
    table_line = next(
        line
        for line in torch._C._dispatch_dump_table("aten::add.Tensor").splitlines()
        if line.startswith("PrivateUse1:")
    )
    assert table_line.endswith("[default backend kernel]")
    registered = torch._C._dispatch_dump("aten::add.Tensor")
    location = table_line.split(": ", 1)[1].removesuffix(" [default backend kernel]")
    assert f"CompositeExplicitAutogradNonFunctional[alias]: {location} ::" in registered
    assert "CompositeExplicitAutograd[alias]:" not in registered
    assert add.kernel == tr.COMPOSITE_EXPLICIT_NF
    assert "⇒ CompositeExplicitAutogradNonFunctional" in book.trace(lambda: a + b).text()
