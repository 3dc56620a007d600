"""The dispatch trace: `book.trace(fn)` runs fn and shows what the dispatcher did.

Each aten operator call appears, nested as it happened, with

* the dispatch key set the dispatcher computed for it: the union of its tensor
  (and generator) arguments' key sets, plus the thread-local included keys, minus the excluded
  ones (what ``c10::impl::computeDispatchKeySet`` does), recorded in C++ by the
  probe (book/cpp/trace_probe.cpp) through an ``at::RecordFunction`` callback;
* its path through the operator's dispatch table, read from the live
  dispatcher (``torch._C._dispatch_dump_table``): keys whose entry is a
  fallthrough are skipped, wrapper kernels that redispatch to the keys below
  them (autograd, ADInplaceOrView) are passed through, a BackendSelect kernel
  hands over to the key set it computes from the call's dtype/layout/device
  (and tensor) arguments (the probe computes it the same way), and the
  first other entry is the kernel that ran: an ember kernel, a backend fallback
  (e.g. ember's CPU fallback), a composite decomposition, a CPU kernel;
* the device allocations, frees, copies and kernel launches the ember driver
  performed, where they happened (the driver's event callback).

What this can and cannot see:

* RecordFunction runs in ``Dispatcher::call`` (and ``callBoxed``), never in
  ``Dispatcher::redispatch``: a call is recorded once, with the key set it
  started with. The hops from key to key are reconstructed from the dispatch
  table, not observed. The operators a kernel calls (a composite's
  decomposition, the CPU fallback's CPU calls) are separate calls and appear
  nested under it.
* A few operators are not observed by RecordFunction at all (``aten::size``,
  ``aten::is_leaf``, ... see ``c10::ObservedOperators``), and only the calling
  thread is recorded.
* PyTorch's own ``TORCH_SHOW_DISPATCH_TRACE=1`` prints nothing on the 2.13.0
  release wheel: Dispatcher.h compiles its trace points only under
  ``#if defined(HAS_TORCH_SHOW_DISPATCH_TRACE) || !defined(NDEBUG)``, and the
  wheel is built with NDEBUG and without that macro. This trace is built from
  RecordFunction, the dispatch table and the driver's events instead.
* While it records, the probe owns the ember driver's one event callback
  (``emSetEventCallback``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from book.widgets import table as t
from book.widgets.html import OURS, esc, style

# Call.kernel: what finally ran.
EMBER_KERNEL = "ember kernel"  # a kernel registered by the book (a notebook cell or extension/csrc)
BACKEND_FALLBACK = "backend fallback"  # the final key's backend fallback, e.g. ember's CPU fallback
COMPOSITE_IMPLICIT = "CompositeImplicitAutograd"  # a decomposition: its calls are nested below
COMPOSITE_EXPLICIT = "CompositeExplicitAutograd"  # (or ...NonFunctional) likewise
CPU_KERNEL = "CPU kernel"
OTHER_KERNEL = "kernel"  # a kernel at another key (Meta, Python, ...)
MISSING = "no kernel"  # nothing to run: the call raised NotImplementedError

# Step.action
SKIPPED = "skipped"  # a fallthrough entry
PASSED = "passed"  # a wrapper kernel that redispatched below itself
RAN = "ran"  # the kernel that did the work

# Keys whose kernels are known to redispatch to the keys below them rather than
# do the work: autograd (the generated VariableType kernels), ADInplaceOrView,
# PythonTLSSnapshot. BackendSelect kernels redispatch too, with a key set of
# their own (see `resolve`).
_WRAPPER_PROVENANCE = {"autograd kernel"}
_WRAPPER_KEYS = {"ADInplaceOrView", "PythonTLSSnapshot"}


@dataclass(frozen=True)
class Step:
    """One dispatch key on a call's path."""

    key: str
    entry: t.Entry
    action: str  # SKIPPED, PASSED or RAN


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
    keys: list[str]  # the dispatch key set it was called with, highest priority first
    path: list[Step]  # those keys as dispatch visited them; the last one RAN
    kernel: str  # what finally ran: EMBER_KERNEL, BACKEND_FALLBACK, ... (see module constants)
    children: list[Call | DeviceEvent] = field(default_factory=list)  # in the order they happened

    @property
    def final(self) -> Step | None:
        return self.path[-1] if self.path and self.path[-1].action == RAN else None

    @property
    def passed(self) -> list[str]:
        """Keys whose kernels ran and redispatched (fallthroughs excluded)."""
        return [s.key for s in self.path if s.action == PASSED]

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


def _is_wrapper(key: str, entry: t.Entry) -> bool:
    if entry.kind == t.ALIAS and entry.provenance in _WRAPPER_PROVENANCE:
        return True
    return key in _WRAPPER_KEYS and entry.kind in (t.KERNEL, t.FALLBACK)


def _kernel_kind(step: Step) -> str:
    entry = step.entry
    if entry.kind == t.NOTHING:
        return MISSING
    if entry.ours and entry.kind in (t.KERNEL, t.ALIAS):
        return EMBER_KERNEL
    if entry.kind == t.FALLBACK:
        return BACKEND_FALLBACK
    if entry.kind == t.ALIAS and entry.alias in (t.CIA, "CompositeImplicitAutogradNestedTensor"):
        return COMPOSITE_IMPLICIT
    if entry.kind == t.ALIAS and entry.alias in (t.CEA, t.CEA_NF):
        return COMPOSITE_EXPLICIT
    if step.key == "CPU":
        return CPU_KERNEL
    return OTHER_KERNEL


def resolve(
    table: dict[str, t.Entry], keys: list[str], backend_select: list[str] | None = None
) -> list[Step]:
    """Walk a key set (highest priority first) through an operator's computed table.

    `backend_select` is the key set a BackendSelect kernel redispatches with,
    as the probe computed it from the call's dtype/layout/device and tensors.
    """
    path: list[Step] = []
    pending = list(keys)
    while pending:
        key = pending.pop(0)
        entry = table.get(key, t.NONE_ENTRY)
        if entry.kind == t.FALLTHROUGH:
            path.append(Step(key, entry, SKIPPED))
            continue
        if key == "BackendSelect" and entry.kind == t.KERNEL and backend_select is not None:
            path.append(Step(key, entry, PASSED))
            pending = list(backend_select)
            continue
        if key != "BackendSelect" and _is_wrapper(key, entry):
            path.append(Step(key, entry, PASSED))
            continue
        path.append(Step(key, entry, RAN))
        return path
    # Every key was skipped: the dispatcher uses the Undefined entry.
    entry = table.get("Undefined", t.NONE_ENTRY)
    path.append(Step("Undefined", entry, RAN))
    return path


class Trace:
    """What `fn` made the dispatcher and the ember driver do. Displays itself.

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

    def text(self) -> str:
        return render_text(self)

    def html(self) -> str:
        return render_html(self)

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return {"text/plain": self.text(), "text/html": self.html()}


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
            path = resolve(tables[name], record["keys"], record.get("backend_select"))
            call = Call(name, list(record["keys"]), path, _kernel_kind(path[-1]))
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


def trace(fn: Callable[[], object]) -> Trace:
    """Run ``fn()`` and return what the dispatcher and the ember driver did.

    The trace records the calling thread only. ``fn``'s return value is dropped
    before the recording stops, so memory it would hand back is freed inside
    the trace (the free shows up as the last event) and no device memory
    outlives it. If ``fn`` raises, the exception propagates (no trace is shown).
    See this module's docstring for what the trace can and cannot see.
    """
    from book.widgets.probe import Recorder

    with Recorder() as recorder:
        fn()  # the result is dropped here, inside the recording
    return build(recorder.records)


# ---- rendering ---------------------------------------------------------------


def _path_text(call: Call) -> str:
    parts = []
    for step in call.path:
        parts.append(f"({step.key})" if step.action == SKIPPED else step.key)
    return " → ".join(parts)


def _badge_text(call: Call) -> str:
    final = call.path[-1]
    if call.kernel == EMBER_KERNEL:
        return f"ember kernel  {final.entry.location}"
    if call.kernel == BACKEND_FALLBACK:
        where = f"  {final.entry.location}" if final.entry.ours else ""
        return f"{final.key} backend fallback{where}"
    if call.kernel == OTHER_KERNEL:
        return f"{final.key} kernel"
    if call.kernel == MISSING:
        return f"no kernel for {final.key}"
    return call.kernel


def render_text(trace: Trace) -> str:
    """A deterministic tree: one line per call or device event."""
    lines = ["dispatch trace: operator  key path, (fallthrough keys skipped)  ⇒ what ran"]

    def visit(items: list[Call | DeviceEvent], prefix: str) -> None:
        for i, item in enumerate(items):
            last = i == len(items) - 1
            branch = "└─ " if last else "├─ "
            if isinstance(item, DeviceEvent):
                lines.append(f"{prefix}{branch}▪ {item.text(trace.device_type)}")
                continue
            lines.append(f"{prefix}{branch}{item.name}  {_path_text(item)}  ⇒ {_badge_text(item)}")
            visit(item.children, prefix + ("   " if last else "│  "))

    visit(trace.items, "")
    if not trace.items:
        lines.append("(no operator calls and no device events)")
    return "\n".join(lines)


_BADGE_CLASS = {
    EMBER_KERNEL: "ember-k-ember",
    BACKEND_FALLBACK: "ember-k-fallback",
    COMPOSITE_IMPLICIT: "ember-k-composite",
    COMPOSITE_EXPLICIT: "ember-k-composite",
    CPU_KERNEL: "ember-k-cpu",
    OTHER_KERNEL: "ember-k-other",
    MISSING: "ember-k-missing",
}

_CSS = f"""
.ember-trace {{ font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px; color: #111827;
  background: #ffffff; margin: 4px 0; overflow-x: auto; }}
.ember-trace .ember-title {{ font-weight: 600; margin: 2px 0 6px 0; }}
.ember-trace details > details, .ember-trace details > .ember-leaf {{ margin-left: 18px; }}
.ember-trace summary {{ cursor: pointer; list-style: none; }}
.ember-trace summary::-webkit-details-marker {{ display: none; }}
.ember-trace summary::before {{ content: "▾"; display: inline-block; width: 14px; color: #6b7280; }}
.ember-trace details:not([open]) > summary::before {{ content: "▸"; }}
.ember-trace .ember-leaf::before {{ content: ""; display: inline-block; width: 14px; }}
.ember-trace .ember-trace-row {{ padding: 2px 0; white-space: nowrap; }}
.ember-trace .ember-op {{ font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace; font-weight: 600;
  margin-right: 8px; }}
.ember-trace .ember-chip {{ display: inline-block; border: 1px solid #9ca3af; border-radius: 9px;
  padding: 0 7px; margin-right: 3px; font-size: 12px; background: #f9fafb; color: #374151; }}
.ember-trace .ember-chip.ember-passed {{ background: #ede9fe; border-color: #a78bfa; color: #4c1d95; }}
.ember-trace .ember-chip.ember-skipped {{ background: #ffffff; border-style: dashed; color: #9ca3af;
  text-decoration: line-through; }}
.ember-trace .ember-chip.ember-ran {{ background: #1f2937; border-color: #1f2937; color: #ffffff; }}
.ember-trace .ember-arrow {{ color: #9ca3af; margin: 0 3px 0 0; }}
.ember-trace .ember-badge {{ display: inline-block; border-radius: 4px; padding: 0 7px; margin-left: 6px;
  font-size: 12px; font-weight: 600; }}
.ember-trace .ember-k-ember {{ background: {OURS}; color: #ffffff; }}
.ember-trace .ember-k-fallback {{ background: #fef3c7; color: #78350f; border: 1px solid #f59e0b; }}
.ember-trace .ember-k-composite {{ background: #ede9fe; color: #4c1d95; border: 1px solid #a78bfa; }}
.ember-trace .ember-k-cpu {{ background: #dbeafe; color: #1e3a8a; border: 1px solid #60a5fa; }}
.ember-trace .ember-k-other {{ background: #e5e7eb; color: #1f2937; border: 1px solid #9ca3af; }}
.ember-trace .ember-k-missing {{ background: #fee2e2; color: #991b1b; border: 1px solid #f87171; }}
.ember-trace .ember-where {{ font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace; font-size: 11px;
  color: #6b7280; margin-left: 6px; }}
.ember-trace .ember-event {{ font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace; font-size: 12px;
  color: #065f46; }}
.ember-trace .ember-event .ember-event-kind {{ display: inline-block; min-width: 4.5em; font-weight: 700;
  background: #d1fae5; border: 1px solid #34d399; border-radius: 3px; padding: 0 5px; margin-right: 6px; }}
.ember-trace .ember-legend {{ margin-top: 6px; font-size: 12px; color: #374151; }}
"""


def _chips_html(call: Call) -> str:
    chips = []
    for i, step in enumerate(call.path):
        if i:
            chips.append('<span class="ember-arrow">→</span>')
        chips.append(
            f'<span class="ember-chip ember-{step.action}" title="{esc(step.action + ": " + step.entry.description)}">'
            f"{esc(step.key)}</span>"
        )
    return "".join(chips)


def _badge_html(call: Call) -> str:
    final = call.path[-1]
    text = {
        BACKEND_FALLBACK: f"{final.key} backend fallback",
        OTHER_KERNEL: f"{final.key} kernel",
        MISSING: f"no kernel for {final.key}",
    }.get(call.kernel, call.kernel)
    badge = f'<span class="ember-badge {_BADGE_CLASS[call.kernel]}" title="{esc(final.entry.description)}">'
    badge += f"{esc(text)}</span>"
    if final.entry.ours:
        badge += f'<span class="ember-where">{esc(final.entry.location)}</span>'
    return badge


def _event_html(event: DeviceEvent, device_type: str) -> str:
    kind, _, rest = event.text(device_type).partition(" ")
    return (
        f'<div class="ember-trace-row ember-event ember-leaf"><span class="ember-event-kind">{esc(kind)}</span>'
        f"{esc(rest)}</div>"
    )


def _items_html(items: list[Call | DeviceEvent], device_type: str) -> str:
    out = []
    for item in items:
        if isinstance(item, DeviceEvent):
            out.append(_event_html(item, device_type))
            continue
        row = (
            f'<span class="ember-op" title="dispatch key set: {esc(", ".join(item.keys))}">{esc(item.name)}</span>'
            f"{_chips_html(item)}{_badge_html(item)}"
        )
        if item.children:
            out.append(
                f'<details open><summary class="ember-trace-row ember-call">{row}</summary>'
                f"{_items_html(item.children, device_type)}</details>"
            )
        else:
            out.append(f'<div class="ember-trace-row ember-call ember-leaf">{row}</div>')
    return "".join(out)


def render_html(trace: Trace) -> str:
    """Self-contained HTML: nested <details> (collapsible without JavaScript)."""
    body = (
        _items_html(trace.items, trace.device_type) or "<div>(no operator calls and no device events)</div>"
    )
    legend = (
        '<span class="ember-chip ember-passed">key</span>a kernel that redispatched · '
        '<span class="ember-chip ember-skipped">key</span>a fallthrough, skipped · '
        '<span class="ember-chip ember-ran">key</span>the kernel that ran · '
        "hover an operator for its dispatch key set, a key for its table entry"
    )
    return (
        '<div class="ember-trace">'
        + style(_CSS)
        + '<div class="ember-title">dispatch trace</div>'
        + f'<div class="ember-body">{body}</div>'
        + f'<div class="ember-legend">{legend}</div>'
        + "</div>"
    )
