"""The dispatch table widget: `show_table(ops, keys=None, since=None)`.

Static output (what the built book shows, what nbval compares): a
self-contained HTML table and a fixed-width text grid, both deterministic.
Live in Jupyter the same object also offers an ipywidgets view with controls
to pick operators (names or glob patterns) and keys; it re-reads the live
dispatcher on every change.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from book.widgets import table as t
from book.widgets.html import OURS, esc, kind_css, style

_CHANGE_MARK = {t.ADDED: "+", t.CHANGED: "~", t.REMOVED: "−", t.SAME: "·"}

LEGEND = [
    ("kernel", t.KERNEL, "a kernel registered at this key"),
    ("fallback", t.FALLBACK, "the key's backend fallback (registered for all operators)"),
    ("fallthrough", t.FALLTHROUGH, "a fallthrough: the dispatcher skips this key"),
    (
        "CIA · CEA · CEA-NF · Autograd",
        t.ALIAS,
        (
            "copied from a kernel registered at an alias key: CompositeImplicitAutograd, "
            "CompositeExplicitAutograd, CompositeExplicitAutogradNonFunctional, Autograd"
        ),
    ),
    ("—", t.NOTHING, "nothing: calling the operator with this key on top fails"),
]

_CSS = f"""
.ember-dispatch-table {{ font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; font-size: 13px;
  color: #111827; background: #ffffff; margin: 4px 0; overflow-x: auto; }}
.ember-dispatch-table .ember-title {{ font-weight: 600; margin: 2px 0 6px 0; }}
.ember-dispatch-table table.ember-grid {{ border-collapse: collapse; }}
.ember-dispatch-table th, .ember-dispatch-table td {{ border: 1px solid #d1d5db; padding: 3px 8px;
  text-align: left; vertical-align: top; }}
.ember-dispatch-table thead th {{ background: #f9fafb; font-weight: 600; white-space: nowrap; }}
.ember-dispatch-table th.ember-op {{ font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace;
  font-weight: 500; background: #f9fafb; white-space: nowrap; }}
.ember-dispatch-table td.ember-cell {{ white-space: nowrap; min-width: 5.5em; }}
{kind_css(".ember-dispatch-table td.ember-cell")}
.ember-dispatch-table td.ember-cell.ember-fallthrough {{ font-style: italic; }}
.ember-dispatch-table td.ember-cell.ember-ours {{ outline: 2px solid {OURS}; outline-offset: -2px;
  font-weight: 600; }}
.ember-dispatch-table .ember-where {{ display: block; font-weight: 400; font-size: 11px; color: {OURS};
  font-family: ui-monospace, 'SFMono-Regular', Menlo, monospace; }}
.ember-dispatch-table td.ember-cell.ember-same {{ background: #ffffff; color: #d1d5db; }}
.ember-dispatch-table .ember-mark {{ font-weight: 700; margin-right: 3px; }}
.ember-dispatch-table td.ember-added {{ box-shadow: inset 4px 0 0 #16a34a; }}
.ember-dispatch-table td.ember-changed {{ box-shadow: inset 4px 0 0 #d97706; }}
.ember-dispatch-table td.ember-removed {{ box-shadow: inset 4px 0 0 #dc2626; text-decoration: line-through; }}
.ember-dispatch-table .ember-legend {{ margin-top: 6px; font-size: 12px; color: #374151; }}
.ember-dispatch-table .ember-legend span.ember-swatch {{ display: inline-block; padding: 0 6px;
  border: 1px solid #d1d5db; margin-right: 4px; }}
{kind_css(".ember-dispatch-table .ember-legend span.ember-swatch")}
.ember-dispatch-table .ember-legend div {{ margin: 1px 0; }}
.ember-dispatch-table .ember-error {{ color: #b91c1c; }}
"""


def _cell_text(cell: t.Cell) -> str:
    """The text grid's cell: the entry's label, ★ if ours, a change mark with since=."""
    if cell.change is None:
        return cell.entry.label + (" ★" if cell.entry.ours else "")
    if cell.change == t.SAME:
        return "·"
    shown = cell.before if cell.change == t.REMOVED else cell.entry
    assert shown is not None
    return f"{_CHANGE_MARK[cell.change]}{shown.label}" + (" ★" if shown.ours else "")


def _title(data: t.TableData) -> str:
    if data.since:
        return "dispatch table: what changed since the snapshot"
    return "dispatch table"


def render_text(data: t.TableData) -> str:
    """A fixed-width grid: one row per operator, one column per dispatch key."""
    header = ["operator", *data.keys]
    rows = [[op, *(_cell_text(data.cell(op, key)) for key in data.keys)] for op in data.ops]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return " │ ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [_title(data), line(header), "─┼─".join("─" * w for w in widths)]
    out += [line(row) for row in rows]
    if data.since:
        out.append("+ new  ~ changed  − removed  · unchanged")
    out.append(
        "kernel · fallback · fallthrough (skipped) · CIA/CEA/CEA-NF/Autograd (from that alias key) · — nothing"
    )
    ours = _ours(data)
    if ours:
        out.append("★ registered by the book:")
        width = max(len(f"{c.op} @ {c.key}") for c in ours)
        for c in ours:
            entry = c.before if c.change == t.REMOVED else c.entry
            assert entry is not None
            out.append(f"  {f'{c.op} @ {c.key}'.ljust(width)}  {entry.label:<8}  {entry.location}")
    return "\n".join(out)


def _ours(data: t.TableData) -> list[t.Cell]:
    """Cells holding the book's own registrations (with since=: changed ones only)."""
    found = []
    for op in data.ops:
        for key in data.keys:
            cell = data.cell(op, key)
            if data.since and cell.change == t.SAME:
                continue
            entry = cell.before if cell.change == t.REMOVED else cell.entry
            if entry is not None and entry.ours:
                found.append(cell)
    return found


def _cell_html(cell: t.Cell) -> str:
    entry = cell.entry
    classes = ["ember-cell"]
    title = entry.description
    if cell.change is not None:
        classes.append(f"ember-{cell.change}")
        if cell.change == t.SAME:
            return f'<td class="ember-cell ember-same" title="{esc("unchanged: " + title)}">·</td>'
        assert cell.before is not None
        if cell.change == t.REMOVED:
            entry = cell.before
            title = f"removed; was: {cell.before.description}"
        elif cell.change == t.CHANGED:
            title = f"now: {entry.description}; was: {cell.before.description}"
        else:
            title = f"new: {entry.description}"
    classes.append(f"ember-{entry.kind}")
    if entry.ours:
        classes.append("ember-ours")
    mark = f'<span class="ember-mark">{_CHANGE_MARK[cell.change]}</span>' if cell.change else ""
    where = f'<span class="ember-where">{esc(entry.location)}</span>' if entry.ours else ""
    return f'<td class="{" ".join(classes)}" title="{esc(title)}">{mark}{esc(entry.label)}{where}</td>'


def render_html(data: t.TableData) -> str:
    """A self-contained HTML table (inline style, no JavaScript)."""
    head = "".join(f'<th class="ember-key">{esc(k)}</th>' for k in data.keys)
    body = []
    for op in data.ops:
        cells = "".join(_cell_html(data.cell(op, key)) for key in data.keys)
        body.append(f'<tr><th class="ember-op">{esc(op)}</th>{cells}</tr>')
    legend = "".join(
        f'<div><span class="ember-swatch ember-{kind}">{esc(label)}</span>{esc(text)}</div>'
        for label, kind, text in LEGEND
    )
    legend += (
        f'<div><span class="ember-swatch" style="outline: 2px solid {OURS}; outline-offset: -2px;">★</span>'
        "registered by the book's own code (a notebook cell or extension/csrc)</div>"
    )
    if data.since:
        legend += "<div>+ new, ~ changed, − removed since the snapshot; · unchanged</div>"
    return (
        '<div class="ember-dispatch-table">'
        + style(_CSS)
        + f'<div class="ember-title">{esc(_title(data))}</div>'
        + '<table class="ember-grid"><thead><tr><th class="ember-op-head">operator</th>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        + f'<div class="ember-legend">{legend}</div>'
        + "</div>"
    )


class DispatchTable:
    """The displayed widget. Reads the live dispatcher once, when created."""

    def __init__(
        self,
        ops: str | Iterable[str],
        keys: Iterable[str] | None = None,
        since: t.Snapshot | None = None,
    ) -> None:
        self.patterns = [ops] if isinstance(ops, str) else list(ops)
        self.keys = None if keys is None else list(keys)
        self.since = since
        self.data = t.table_data(self.patterns, self.keys, since)

    def text(self) -> str:
        return render_text(self.data)

    def html(self) -> str:
        return render_html(self.data)

    def __repr__(self) -> str:
        return self.text()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle: dict[str, Any] = {"text/plain": self.text(), "text/html": self.html()}
        from book.widgets import interactive

        view = interactive.table_view(self)
        if view is not None:
            bundle.update(view)
        return bundle
