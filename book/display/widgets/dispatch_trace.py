"""The dispatch trace's model: what one run of a function made the dispatcher and the driver do.

``record(fn)`` runs fn under the probe (book/builds/cpp/trace_probe.cpp) and returns
a `Trace`: each aten operator call, nested as it happened, with

* ``keys``: the dispatch key set ``Dispatcher::call`` looked up, computed the
  way ``c10::DispatchKeyExtractor`` does: the union of the key sets of the
  call's tensor (and generator) arguments, plus the thread-local included
  keys, minus the thread-local excluded ones (the probe takes this in C++
  while the call starts), then masked by the operator's non-fallthrough keys
  (from the live computed table, ``torch._C._dispatch_dump_table``; per
  backend, as ``nonFallthroughKeysPerBackend_``). Its highest key is where the
  call *entered*;
* ``path``: the keys the call went through. From the entry key on, every
  kernel PyTorch is known to redispatch from hands a smaller key set to the
  next lookup, exactly as the C++ does:

  - an autograd kernel (the generated VariableType kernels, the autograd
    fallback for operators without one): ``ks & c10::after_autograd_keyset``,
    every autograd key gone, so a call on an ember tensor and a CPU tensor
    visits ``AutogradPrivateUse1`` and never ``AutogradCPU``
    (tools/autograd/gen_variable_type.py, torch/csrc/autograd/VariableTypeManual.cpp,
    torch/csrc/autograd/autograd_not_implemented_fallback.cpp);
  - an ADInplaceOrView kernel: ``ks & c10::after_ADInplaceOrView_keyset``
    (gen_inplace_or_view_type.py);
  - a BackendSelect kernel: a new key set from the call's dtype/layout/device
    and tensors (generated RegisterBackendSelect.cpp; the probe computes it the
    same way);
  - the PythonTLSSnapshot and PreDispatch fallbacks (PythonFallbackKernel.cpp)
    and the Conjugate, Negative and ZeroTensor fallbacks (MathBitsFallback.h,
    ZeroTensorFallback.cpp): ``ks & DispatchKeySet(FULL_AFTER, key)``.

  Keys whose entry is a fallthrough were masked out before the lookup; the
  path lists them as SKIPPED where they would have been. Any other kernel is
  the one that RAN: an ember kernel, a backend fallback (e.g. ember's CPU
  fallback), a composite kernel (named after the alias key it was registered
  at: CompositeImplicitAutograd, CompositeExplicitAutograd or
  CompositeExplicitAutogradNonFunctional), a CPU kernel, an autocast wrapper
  (it calls the operator again, which appears nested)...;
* the device allocations, frees, copies and kernel launches the ember driver
  performed, where they happened (the driver's event callback).

What is observed and what is inferred:

* RecordFunction runs in ``Dispatcher::call`` (and ``callBoxed``), never in
  ``Dispatcher::redispatch``: the probe sees each call once, where it enters.
  Every step after the entry key is *inferred* from the dispatch table and the
  redispatch rules above (``Step.inferred``), not observed; the views say so.
  The operators a kernel calls (a composite's decomposition, the CPU
  fallback's CPU calls) are separate calls, observed, and appear nested.
* A few operators are not observed by RecordFunction at all (``aten::size``,
  ``aten::is_leaf``, ... see ``c10::ObservedOperators``), and only the calling
  thread is recorded.
* PyTorch's own ``TORCH_SHOW_DISPATCH_TRACE=1`` prints nothing on the 2.13.0
  release wheel: Dispatcher.h compiles its trace points only under
  ``#if defined(HAS_TORCH_SHOW_DISPATCH_TRACE) || !defined(NDEBUG)``, and the
  wheel is built with NDEBUG and without that macro.
* While it records, the probe owns the ember driver's one event callback
  (``emSetEventCallback``).

The views (text and HTML) are in `book.display.widgets.trace_view`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from book.display.widgets import keysets
from book.display.widgets import table as t

# Call.kernel: what finally ran. Composite kernels are named after their alias key.
EMBER_KERNEL = "ember kernel"  # a kernel registered by the book (a notebook cell or extension/csrc)
BACKEND_FALLBACK = "backend fallback"  # the final key's backend fallback, e.g. ember's CPU fallback
COMPOSITE_IMPLICIT = t.CIA  # a decomposition: its calls are nested below
COMPOSITE_IMPLICIT_NESTED = "CompositeImplicitAutogradNestedTensor"
COMPOSITE_EXPLICIT = t.CEA  # likewise, registered at CompositeExplicitAutograd
COMPOSITE_EXPLICIT_NF = t.CEA_NF  # likewise, at CompositeExplicitAutogradNonFunctional
COMPOSITES = (COMPOSITE_IMPLICIT, COMPOSITE_IMPLICIT_NESTED, COMPOSITE_EXPLICIT, COMPOSITE_EXPLICIT_NF)
CPU_KERNEL = "CPU kernel"
OTHER_KERNEL = "kernel"  # a kernel at another key (Meta, Python, AutocastCPU, ...)
MISSING = "no kernel"  # nothing to run: the call raised NotImplementedError

# Step.action
SKIPPED = "skipped"  # a fallthrough entry: masked out of the key set, never visited
PASSED = "passed"  # a kernel that redispatched below itself
RAN = "ran"  # the kernel that did the work

# Step.via: how the dispatcher came to look this key up.
ENTRY = "entry"  # Dispatcher::call, from the call's own key set (see Call.keys)
AFTER_AUTOGRAD = "after_autograd_keyset"  # an autograd kernel's redispatch
AFTER_AD_INPLACE_OR_VIEW = "after_ADInplaceOrView_keyset"  # an ADInplaceOrView kernel's redispatch
BACKEND_SELECT = "BackendSelect"  # the key set a BackendSelect kernel computes
FULL_AFTER = "FULL_AFTER"  # ks & DispatchKeySet(FULL_AFTER, key): a fallback that redispatches below itself

# Where PyTorch registers the kernels that redispatch (normalized table locations).
_AUTOGRAD_KERNELS = "torch/csrc/autograd/"  # generated VariableType*.cpp and VariableTypeManual.cpp
_AUTOGRAD_FALLBACK = "aten/src/ATen/core/VariableFallbackKernel.cpp"
_AD_INPLACE_OR_VIEW_KERNELS = (
    "torch/csrc/autograd/"  # generated ADInplaceOrViewType*.cpp, VariableTypeManual.cpp
)
_FULL_AFTER_FALLBACKS = {
    "PythonTLSSnapshot": "aten/src/ATen/core/PythonFallbackKernel.cpp",
    "PreDispatch": "aten/src/ATen/core/PythonFallbackKernel.cpp",
    "Conjugate": "aten/src/ATen/ConjugateFallback.cpp",
    "Negative": "aten/src/ATen/native/NegateFallback.cpp",
    "ZeroTensor": "aten/src/ATen/ZeroTensorFallback.cpp",
}


@dataclass(frozen=True)
class Step:
    """One dispatch key on a call's path."""

    key: str
    entry: t.Entry
    action: str  # SKIPPED, PASSED or RAN
    inferred: bool  # reached by a redispatch: reconstructed from the table, not observed
    via: str = ENTRY  # ENTRY or the redispatch rule that led here (AFTER_AUTOGRAD, ...)
    keys: tuple[str, ...] = ()  # the key set looked up at this step, highest first (() if SKIPPED)
    after: str | None = None  # the key whose kernel redispatched to this step (None at the entry)


@dataclass
class DeviceEvent:
    """What the ember driver did: malloc, free, memcpy or launch."""

    kind: str
    device: int
    bytes: int = 0
    direction: str | None = None  # memcpy: "H2D", "D2H" or "D2D"
    peer: int | None = None  # D2D memcpy: the source device
    buffers: int | None = None  # launch: buffers handed to the kernel

    def text(self, device_type: str) -> str:
        dev = f"{device_type}:{self.device}"
        if self.kind == "memcpy":
            if self.direction == "H2D":
                return f"memcpy H2D {self.bytes} B  cpu → {dev}"
            if self.direction == "D2H":
                return f"memcpy D2H {self.bytes} B  {dev} → cpu"
            return f"memcpy D2D {self.bytes} B  {device_type}:{self.peer} → {dev}"
        if self.kind == "launch":
            noun = "buffer" if self.buffers == 1 else "buffers"
            return f"launch on {dev} ({self.buffers} {noun})"
        return f"{self.kind} {self.bytes} B on {dev}"


@dataclass
class Call:
    """One operator call, as the dispatcher saw it."""

    name: str  # "aten::add.Tensor"
    keys: list[str]  # the key set Dispatcher::call looked up, highest priority first
    masked: list[str]  # keys of the arguments and TLS that the operator's fallthroughs masked out
    path: list[Step]  # the keys dispatch went through; the last one RAN
    kernel: str  # what finally ran: EMBER_KERNEL, BACKEND_FALLBACK, an alias key, ... (module constants)
    children: list[Call | DeviceEvent] = field(default_factory=list)  # in the order they happened

    @property
    def entered(self) -> str:
        """The key the call entered at: the highest of `keys`."""
        return next(s.key for s in self.path if s.action != SKIPPED)

    @property
    def visited(self) -> list[str]:
        """The keys whose kernels ran, in order: those that redispatched, then the one that did the work."""
        return [s.key for s in self.path if s.action != SKIPPED]

    @property
    def final(self) -> Step | None:
        return self.path[-1] if self.path and self.path[-1].action == RAN else None

    @property
    def passed(self) -> list[str]:
        """Keys whose kernels ran and redispatched (fallthroughs excluded)."""
        return [s.key for s in self.path if s.action == PASSED]

    @property
    def skipped(self) -> list[str]:
        return [s.key for s in self.path if s.action == SKIPPED]

    @property
    def calls(self) -> list[Call]:
        return [c for c in self.children if isinstance(c, Call)]

    @property
    def events(self) -> list[DeviceEvent]:
        """Device events directly under this call (not those of nested calls)."""
        return [c for c in self.children if isinstance(c, DeviceEvent)]

    def walk(self) -> Iterator[Call]:
        yield self
        for child in self.calls:
            yield from child.walk()


def redispatch_rule(key: str, entry: t.Entry) -> str | None:
    """The rule by which the kernel at `key` redispatches below itself, or None if it does the work."""
    where = entry.location or ""
    if entry.kind in (t.FALLTHROUGH, t.NOTHING):
        return None
    if keysets.is_autograd(key):
        generated = (
            entry.kind == t.ALIAS and entry.alias == "Autograd" and where.startswith(_AUTOGRAD_KERNELS)
        )
        fallback = entry.kind == t.FALLBACK and where.startswith(_AUTOGRAD_FALLBACK)
        return AFTER_AUTOGRAD if generated or fallback else None
    if key == "ADInplaceOrView" and entry.kind == t.KERNEL and where.startswith(_AD_INPLACE_OR_VIEW_KERNELS):
        return AFTER_AD_INPLACE_OR_VIEW
    if key == "BackendSelect" and entry.kind == t.KERNEL:
        return BACKEND_SELECT
    fallback_file = _FULL_AFTER_FALLBACKS.get(key)
    if fallback_file and entry.kind == t.FALLBACK and where.startswith(fallback_file):
        return FULL_AFTER
    return None


def _redispatch_mask(rule: str, key: str) -> keysets.KeySet:
    if rule == AFTER_AUTOGRAD:
        return keysets.AFTER_AUTOGRAD
    if rule == AFTER_AD_INPLACE_OR_VIEW:
        return keysets.AFTER_AD_INPLACE_OR_VIEW
    return keysets.full_after(key)


def dispatch_keys(table: dict[str, t.Entry], candidates: keysets.KeySet) -> keysets.KeySet:
    """The key set Dispatcher::call looks up: `candidates` masked by the operator's fallthroughs."""
    return candidates & keysets.fallthrough_mask(
        candidates, lambda k: table.get(k, t.NONE_ENTRY).kind == t.FALLTHROUGH
    )


def resolve(
    table: dict[str, t.Entry], candidates: keysets.KeySet, backend_select: keysets.KeySet | None = None
) -> list[Step]:
    """The path of a call through an operator's computed table.

    `candidates` is the key set the call started from (arguments' keys plus
    thread-local included, minus excluded); `backend_select` the key set the
    operator's BackendSelect kernel redispatches with, as the probe computed
    it (None if the operator has none).
    """
    keys = dispatch_keys(table, candidates)
    present = candidates  # what `keys` would be without the fallthrough mask
    path: list[Step] = []
    via: str = ENTRY
    inferred, previous = False, None
    # Each redispatch removes at least the key it leaves, so the walk is short.
    for _ in range(len(keysets.names(keysets.FULL)) + 1):
        current = keysets.highest(keys)
        for masked in keysets.masked_between(present, keys, previous, current):
            path.append(Step(masked, table.get(masked, t.NONE_ENTRY), SKIPPED, inferred, via, (), previous))
        entry = table.get(current, t.NONE_ENTRY)
        rule = redispatch_rule(current, entry)
        if rule == BACKEND_SELECT and backend_select is None:
            rule = None  # the probe could not compute it: show the BackendSelect kernel as what ran
        looked_up = tuple(keysets.names(keys))
        if rule is None:
            path.append(Step(current, entry, RAN, inferred, via, looked_up, previous))
            return path
        path.append(Step(current, entry, PASSED, inferred, via, looked_up, previous))
        if rule == BACKEND_SELECT:
            assert backend_select is not None
            keys = present = backend_select
        else:
            mask = _redispatch_mask(rule, current)
            keys, present = keys & mask, present & mask
        via, inferred, previous = rule, True, current
    raise RuntimeError(f"book.trace: the dispatch path from {keysets.names(candidates)} does not end")


def _an_ember_kernel(step: Step) -> bool:
    """C++ of the book's, or a Python kernel of the reader's at one of ember's keys.

    A kernel a notebook cell registers from Python for another backend (chapter
    00's SparseCPU gelu) is the reader's, but not an ember kernel.
    """
    location = step.entry.location or ""
    return not location.startswith(t.NOTEBOOK_CELL) or "PrivateUse1" in step.key


def kernel_kind(step: Step) -> str:
    """What ran at the final step: EMBER_KERNEL, BACKEND_FALLBACK, an alias key, CPU_KERNEL, ..."""
    entry = step.entry
    if entry.kind == t.NOTHING:
        return MISSING
    if entry.ours and entry.kind in (t.KERNEL, t.ALIAS) and _an_ember_kernel(step):
        return EMBER_KERNEL
    if entry.kind == t.FALLBACK:
        return BACKEND_FALLBACK
    if entry.kind == t.ALIAS and entry.alias in COMPOSITES:
        return entry.alias
    if step.key == "CPU" and entry.kind == t.KERNEL:
        return CPU_KERNEL
    return OTHER_KERNEL


class Trace:
    """What `fn` made the dispatcher and the ember driver do (the model; views in trace_view).

    ``items`` holds the top-level calls and device events in order; ``calls``
    the top-level calls; ``walk()`` every call, depth first; ``all_events()``
    every device event.
    """

    def __init__(self, items: list[Call | DeviceEvent], device_type: str) -> None:
        self.items = items
        self.device_type = device_type

    @property
    def calls(self) -> list[Call]:
        return [c for c in self.items if isinstance(c, Call)]

    def walk(self) -> Iterator[Call]:
        for call in self.calls:
            yield from call.walk()

    def all_events(self) -> list[DeviceEvent]:
        found: list[DeviceEvent] = []

        def visit(items: list[Call | DeviceEvent]) -> None:
            for item in items:
                if isinstance(item, DeviceEvent):
                    found.append(item)
                else:
                    visit(item.children)

        visit(self.items)
        return found

    def find(self, name: str) -> list[Call]:
        """Every call of `name` ("aten::add.Tensor", or "aten::add" for any overload)."""
        return [c for c in self.walk() if c.name == name or c.name.split(".")[0] == name]

    @property
    def inferred(self) -> bool:
        """Whether any step of any call was reconstructed from the dispatch table."""
        return any(s.inferred and s.action != SKIPPED for c in self.walk() for s in c.path)


def build(records: list[dict[str, Any]], device_type: str | None = None) -> Trace:
    """Turn the probe's flat records into a Trace (tree + dispatch paths)."""
    tables: dict[str, dict[str, t.Entry]] = {}
    top: list[Call | DeviceEvent] = []
    stack: list[Call] = []
    for record in records:
        kind = record["k"]
        if kind == "call":
            if record["depth"] != len(stack):
                raise RuntimeError(f"book.trace: the probe's records do not nest at {record['name']}")
            name = record["name"] + (f".{record['overload']}" if record["overload"] else "")
            if name not in tables:
                tables[name] = t.parse_table(name)
            table = tables[name]
            candidates = keysets.from_raw(record["keys"])
            selected = record.get("backend_select")
            path = resolve(table, candidates, None if selected is None else keysets.from_raw(selected))
            looked_up = dispatch_keys(table, candidates)
            call = Call(
                name,
                keysets.names(looked_up),
                keysets.masked_between(candidates, looked_up, None, "Undefined"),
                path,
                kernel_kind(path[-1]),
            )
            (stack[-1].children if stack else top).append(call)
            stack.append(call)
        elif kind == "end":
            stack.pop()
        else:
            event = DeviceEvent(
                kind=kind,
                device=record["device"],
                bytes=record["bytes"],
                direction=record.get("direction"),
                peer=record.get("peer") if record.get("direction") == "D2D" else None,
                buffers=record.get("buffers"),
            )
            (stack[-1].children if stack else top).append(event)
    return Trace(top, device_type or torch._C._get_privateuse1_backend_name())


def record(fn: Callable[[], object]) -> Trace:
    """Run ``fn()`` and return what the dispatcher and the ember driver did (the model only).

    The trace records the calling thread only. ``fn``'s return value is dropped
    before the recording stops, so memory it would hand back is freed inside
    the trace (the free shows up as the last event) and no device memory
    outlives it. If ``fn`` raises, the exception propagates.
    """
    from book.display.widgets.probe import Recorder

    with Recorder() as recorder:
        fn()  # the result is dropped here, inside the recording
    return build(recorder.records)
