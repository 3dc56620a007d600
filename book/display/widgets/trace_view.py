"""The dispatch trace's views: `book.trace(fn)` runs fn and shows what the dispatcher did.

The data is `book.display.widgets.dispatch_trace` (`Trace`, `Call`, `Step`,
`DeviceEvent`); this module only renders it, as a deterministic text tree
(text/plain) and self-contained HTML (nested ``<details>``, no script, no
external resource). Both mark every step that was inferred from the dispatch
table rather than observed (``key*``) and explain the marks in a legend line.
"""

from __future__ import annotations

from collections.abc import Callable

from book.display.widgets import dispatch_trace as tr
from book.display.widgets.html import MONO, OURS, SANS, esc, inline
from book.display.widgets.view import View

INFERRED_MARK = "*"
HEADER = "dispatch trace: operator  key path  ⇒ what ran"
LEGEND_SKIPPED = "(key) fallthrough: masked out, never visited"
LEGEND_INFERRED = (
    f"key{INFERRED_MARK} inferred from the dispatch table, not observed (reached by a redispatch)"
)
EMPTY = "(no operator calls and no device events)"

_VIA = {
    tr.AFTER_AUTOGRAD: "ks & c10::after_autograd_keyset (every autograd key removed)",
    tr.AFTER_AD_INPLACE_OR_VIEW: "ks & c10::after_ADInplaceOrView_keyset",
    tr.BACKEND_SELECT: "the key set of the call's device, layout and dtype arguments and its tensors",
}


class DispatchTrace(View, tr.Trace):
    """A `Trace` that displays itself: text/plain and text/html."""

    @classmethod
    def of(cls, model: tr.Trace) -> DispatchTrace:
        return cls(model.items, model.device_type)

    def text(self) -> str:
        return render_text(self)

    def html(self) -> str:
        return render_html(self)


def trace(fn: Callable[[], object]) -> DispatchTrace:
    """Run ``fn()`` and show what the dispatcher and the ember driver did.

    Returns the trace (a `dispatch_trace.Trace` with views). See
    `dispatch_trace` for what is observed and what is inferred. If ``fn``
    raises, the exception propagates (no trace is shown).
    """
    return DispatchTrace.of(tr.record(fn))


# ---- what each mark means ----------------------------------------------------------


def _has_skipped(trace: tr.Trace) -> bool:
    return any(call.skipped for call in trace.walk())


def legend_lines(trace: tr.Trace) -> list[str]:
    """The legend entries this trace needs (none for a trace without those marks)."""
    lines = []
    if _has_skipped(trace):
        lines.append(LEGEND_SKIPPED)
    if trace.inferred:
        lines.append(LEGEND_INFERRED)
    return lines


def step_title(step: tr.Step) -> str:
    """One tooltip: what the table holds at the step's key, and how the dispatcher got there."""
    text = f"{step.action}: {step.entry.description}"
    if step.action == tr.SKIPPED:
        return text
    if step.via == tr.ENTRY:
        how = "The call entered here: the highest key of its key set, computed when the call started."
    else:
        rule = _VIA.get(step.via, f"ks & DispatchKeySet(FULL_AFTER, {step.after})")
        how = f"Inferred from the dispatch table: the {step.after} kernel redispatched with {rule}."
    return f"{text}. Key set looked up: {', '.join(step.keys) or '(empty)'}. {how}"


def _step_text(step: tr.Step) -> str:
    if step.action == tr.SKIPPED:
        return f"({step.key})"
    return step.key + (INFERRED_MARK if step.inferred else "")


def _badge_text(call: tr.Call) -> str:
    final = call.path[-1]
    if call.kernel == tr.EMBER_KERNEL:
        return f"ember kernel  {final.entry.location}"
    if call.kernel == tr.BACKEND_FALLBACK:
        where = f"  {final.entry.location}" if final.entry.ours else ""
        return f"{final.key} backend fallback{where}"
    if call.kernel == tr.OTHER_KERNEL:
        return f"{final.key} kernel"
    if call.kernel == tr.MISSING:
        return f"no kernel for {final.key}"
    return call.kernel


# ---- text ---------------------------------------------------------------------------


def render_text(trace: tr.Trace) -> str:
    """A deterministic tree: one line per call or device event, then the legend."""
    lines = [HEADER]

    def visit(items: list[tr.Call | tr.DeviceEvent], prefix: str) -> None:
        for i, item in enumerate(items):
            last = i == len(items) - 1
            branch = "└─ " if last else "├─ "
            if isinstance(item, tr.DeviceEvent):
                lines.append(f"{prefix}{branch}▪ {item.text(trace.device_type)}")
                continue
            path = " → ".join(_step_text(s) for s in item.path)
            lines.append(f"{prefix}{branch}{item.name}  {path}  ⇒ {_badge_text(item)}")
            visit(item.children, prefix + ("   " if last else "│  "))

    visit(trace.items, "")
    if not trace.items:
        lines.append(EMPTY)
    legend = legend_lines(trace)
    if legend:
        lines.append(" · ".join(legend))
    return "\n".join(lines)


# ---- HTML ---------------------------------------------------------------------------

_BADGE_CLASS = {
    tr.EMBER_KERNEL: "ember-k-ember",
    tr.BACKEND_FALLBACK: "ember-k-fallback",
    tr.CPU_KERNEL: "ember-k-cpu",
    tr.OTHER_KERNEL: "ember-k-other",
    tr.MISSING: "ember-k-missing",
    **{alias: "ember-k-composite" for alias in tr.COMPOSITES},
}

_CSS = f"""
.ember-trace {{ font-family: {SANS}; font-size: 13px; color: #111827;
  background: #ffffff; margin: 4px 0; overflow-x: auto; }}
.ember-trace .ember-title {{ font-weight: 600; margin: 2px 0 6px 0; }}
.ember-trace details > details, .ember-trace details > .ember-leaf {{ margin-left: 18px; }}
.ember-trace summary {{ cursor: pointer; }}
.ember-trace details > summary:first-of-type {{ list-style: none; }}
.ember-trace summary::-webkit-details-marker {{ display: none; }}
.ember-trace summary::before {{ content: "▾"; display: inline-block; width: 14px; color: #6b7280; }}
.ember-trace details:not([open]) > summary::before {{ content: "▸"; }}
.ember-trace .ember-leaf::before {{ content: ""; display: inline-block; width: 14px; }}
.ember-trace .ember-trace-row {{ padding: 2px 0; white-space: nowrap; }}
.ember-trace .ember-op {{ font-family: {MONO}; font-weight: 600;
  margin-right: 8px; }}
.ember-trace .ember-chip {{ display: inline-block; border: 1px solid #9ca3af; border-radius: 9px;
  padding: 0 7px; margin-right: 3px; font-size: 12px; background: #f9fafb; color: #374151; }}
.ember-trace .ember-chip.ember-passed {{ background: #ede9fe; border-color: #a78bfa; color: #4c1d95; }}
.ember-trace .ember-chip.ember-skipped {{ background: #ffffff; border-style: dashed; color: #9ca3af;
  text-decoration: line-through; }}
.ember-trace .ember-chip.ember-ran {{ background: #1f2937; border-color: #1f2937; color: #ffffff; }}
.ember-trace .ember-chip.ember-inferred {{ border-style: dotted; border-width: 2px; }}
.ember-trace .ember-chip.ember-ran.ember-inferred {{ border-color: #9ca3af; }}
.ember-trace .ember-mark {{ font-weight: 700; margin-left: 1px; }}
.ember-trace .ember-arrow {{ color: #9ca3af; margin: 0 3px 0 0; }}
.ember-trace .ember-badge {{ display: inline-block; border-radius: 4px; padding: 0 7px; margin-left: 6px;
  font-size: 12px; font-weight: 600; }}
.ember-trace .ember-k-ember {{ background: {OURS}; color: #ffffff; }}
.ember-trace .ember-k-fallback {{ background: #fef3c7; color: #78350f; border: 1px solid #f59e0b; }}
.ember-trace .ember-k-composite {{ background: #ede9fe; color: #4c1d95; border: 1px solid #a78bfa; }}
.ember-trace .ember-k-cpu {{ background: #dbeafe; color: #1e3a8a; border: 1px solid #60a5fa; }}
.ember-trace .ember-k-other {{ background: #e5e7eb; color: #1f2937; border: 1px solid #9ca3af; }}
.ember-trace .ember-k-missing {{ background: #fee2e2; color: #991b1b; border: 1px solid #f87171; }}
.ember-trace .ember-where {{ font-family: {MONO}; font-size: 11px;
  color: #6b7280; margin-left: 6px; }}
.ember-trace .ember-event {{ font-family: {MONO}; font-size: 12px;
  color: #065f46; }}
.ember-trace .ember-event .ember-event-kind {{ display: inline-block; min-width: 4.5em; font-weight: 700;
  background: #d1fae5; border: 1px solid #34d399; border-radius: 3px; padding: 0 5px; margin-right: 6px; }}
.ember-trace .ember-legend {{ margin-top: 6px; font-size: 12px; color: #374151; line-height: 1.8; }}
"""


def _chip_html(step: tr.Step) -> str:
    classes = f"ember-chip ember-{step.action}"
    mark = ""
    if step.inferred and step.action != tr.SKIPPED:
        classes += " ember-inferred"
        mark = f'<span class="ember-mark">{INFERRED_MARK}</span>'
    return f'<span class="{classes}" title="{esc(step_title(step))}">{esc(step.key)}{mark}</span>'


def _chips_html(call: tr.Call) -> str:
    return '<span class="ember-arrow">→</span>'.join(_chip_html(step) for step in call.path)


def _badge_html(call: tr.Call) -> str:
    final = call.path[-1]
    text = {
        tr.BACKEND_FALLBACK: f"{final.key} backend fallback",
        tr.OTHER_KERNEL: f"{final.key} kernel",
        tr.MISSING: f"no kernel for {final.key}",
    }.get(call.kernel, call.kernel)
    badge = f'<span class="ember-badge {_BADGE_CLASS[call.kernel]}" title="{esc(final.entry.description)}">'
    badge += f"{esc(text)}</span>"
    if final.entry.ours:
        badge += f'<span class="ember-where">{esc(final.entry.location)}</span>'
    return badge


def _op_title(call: tr.Call) -> str:
    title = f"dispatch key set: {', '.join(call.keys) or '(empty)'}"
    if call.masked:
        title += f"; fallthroughs masked out: {', '.join(call.masked)}"
    return title


def _event_html(event: tr.DeviceEvent, device_type: str) -> str:
    kind, _, rest = event.text(device_type).partition(" ")
    return (
        f'<div class="ember-trace-row ember-event ember-leaf"><span class="ember-event-kind">{esc(kind)}</span>'
        f"{esc(rest)}</div>"
    )


def _items_html(items: list[tr.Call | tr.DeviceEvent], device_type: str) -> str:
    out = []
    for item in items:
        if isinstance(item, tr.DeviceEvent):
            out.append(_event_html(item, device_type))
            continue
        row = (
            f'<span class="ember-op" title="{esc(_op_title(item))}">{esc(item.name)}</span>'
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


def _legend_html(trace: tr.Trace) -> str:
    parts = [
        '<span class="ember-chip ember-passed">key</span>a kernel that redispatched',
        '<span class="ember-chip ember-ran">key</span>the kernel that ran',
    ]
    if _has_skipped(trace):
        parts.append(
            '<span class="ember-chip ember-skipped">key</span>a fallthrough: masked out, never visited'
        )
    if trace.inferred:
        parts.append(
            f'<span class="ember-chip ember-passed ember-inferred">key<span class="ember-mark">{INFERRED_MARK}</span>'
            "</span>inferred from the dispatch table, not observed: reached by a redispatch (the probe sees "
            "each call only where it enters the dispatcher)"
        )
    parts.append(
        "hover an operator for its dispatch key set, a key for its table entry and how it was reached"
    )
    return " · ".join(parts)


def render_html(trace: tr.Trace) -> str:
    """Self-contained HTML: nested <details> (collapsible without JavaScript), styles inlined."""
    body = _items_html(trace.items, trace.device_type) or f"<div>{esc(EMPTY)}</div>"
    markup = (
        '<div class="ember-trace">'
        + '<div class="ember-title">dispatch trace</div>'
        + f'<div class="ember-body">{body}</div>'
        + f'<div class="ember-legend">{_legend_html(trace)}</div>'
        + "</div>"
    )
    return inline(markup, _CSS)
