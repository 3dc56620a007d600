"""The dispatch table widget: `show_table(ops, keys=None, since=None)`.

Static output (what the built book shows, what nbval compares): a
self-contained HTML table and a fixed-width text grid, both deterministic.
Live in Jupyter the same object also offers an ipywidgets view with controls
to pick operators (names or glob patterns) and keys; it re-reads the live
dispatcher on every change.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from book.display.widgets import interactive
from book.display.widgets import table as t
from book.display.widgets.html import MONO, OURS, SANS, esc, inline, kind_css
from book.display.widgets.view import View

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
.ember-dispatch-table {{ font-family: {SANS}; font-size: 12px; line-height: 1.35; color: #111827;
  background: #ffffff; margin: 4px 0; overflow-x: auto; }}
.ember-dispatch-table .ember-title {{ font-weight: 600; margin: 2px 0 6px 0; }}
.ember-dispatch-table table.ember-grid {{ border-collapse: collapse; margin: 0; }}
.ember-dispatch-table th, .ember-dispatch-table td {{ border: 1px solid #d1d5db; padding: 2px 5px;
  text-align: left; vertical-align: top; }}
.ember-dispatch-table thead th {{ background: #f9fafb; font-weight: 600; white-space: nowrap;
  vertical-align: bottom; }}
.ember-dispatch-table th.ember-op {{ font-family: {MONO}; font-weight: 500; background: #f9fafb; }}
.ember-dispatch-table td.ember-cell {{ white-space: nowrap; }}
{kind_css(".ember-dispatch-table td.ember-cell")}
.ember-dispatch-table td.ember-cell.ember-fallthrough {{ font-style: italic; }}
.ember-dispatch-table td.ember-cell.ember-ours {{ outline: 2px solid {OURS}; outline-offset: -2px;
  font-weight: 600; }}
.ember-dispatch-table .ember-where {{ font-family: {MONO}; font-size: 11px; color: {OURS}; }}
.ember-dispatch-table .ember-ours-list {{ margin-top: 4px; font-size: 12px; }}
.ember-dispatch-table td.ember-cell.ember-same {{ background: #ffffff; color: #d1d5db; }}
.ember-dispatch-table .ember-mark {{ font-weight: 700; margin-right: 3px; }}
.ember-dispatch-table td.ember-added {{ box-shadow: inset 4px 0 0 #16a34a; }}
.ember-dispatch-table td.ember-changed {{ box-shadow: inset 4px 0 0 #d97706; }}
.ember-dispatch-table td.ember-removed {{ box-shadow: inset 4px 0 0 #dc2626; text-decoration: line-through; }}
.ember-dispatch-table .ember-legend {{ margin-top: 6px; font-size: 12px; color: #374151; }}
.ember-dispatch-table .ember-legend span.ember-swatch {{ display: inline-block; padding: 0 6px;
  border: 1px solid #d1d5db; margin-right: 4px; }}
{kind_css(".ember-dispatch-table .ember-legend span.ember-swatch")}
.ember-dispatch-table .ember-legend span.ember-swatch.ember-ours {{ outline: 2px solid {OURS};
  outline-offset: -2px; }}
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


# A key's column header is its name on two lines where that narrows the column: the functionality
# above the backend ("Autograd" over "PrivateUse1"), else the CamelCase break nearest the middle.
_BACKENDS = ("PrivateUse1", "CPU", "CUDA", "Meta", "XLA", "MPS", "HPU", "XPU", "MTIA", "Lazy")
_SPLIT_ABOVE = 8  # names this long or shorter stay on one line, and so does every backend's name


def split_key(key: str) -> tuple[str, ...]:
    """A key's column header lines: ("Autograd", "PrivateUse1"), ("ADInplace", "OrView"), ("CPU",)."""
    if len(key) <= _SPLIT_ABOVE or key in _BACKENDS:
        return (key,)
    for backend in _BACKENDS:
        if key.endswith(backend) and key != backend:
            return (key[: -len(backend)], backend)
    breaks = [
        i
        for i in range(2, len(key) - 1)
        if key[i].isupper() and (key[i - 1].islower() or key[i + 1].islower() and key[i - 1].isupper())
    ]
    if not breaks:
        return (key,)
    i = min(breaks, key=lambda i: abs(2 * i - len(key)))
    return (key[:i], key[i:])


TEXT_LEGEND = (
    "kernel · fallback · fallthrough (skipped) · — nothing",
    "CIA · CEA · CEA-NF · Autograd: copied from a kernel at that alias key",
)


def render_text(data: t.TableData) -> str:
    """A fixed-width grid: one row per operator, one column per dispatch key (headers on two lines)."""
    heads = [split_key(key) for key in data.keys]
    depth = max((len(h) for h in heads), default=1)
    header_lines = [
        ["operator" if line == depth - 1 else ""] + [(("",) * (depth - len(h)) + h)[line] for h in heads]
        for line in range(depth)
    ]
    rows = [[op, *(_cell_text(data.cell(op, key)) for key in data.keys)] for op in data.ops]
    widths = [max(len(row[i]) for row in [*header_lines, *rows]) for i in range(len(data.keys) + 1)]

    def line(cells: list[str]) -> str:
        return " │ ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [_title(data), *(line(h) for h in header_lines), "─┼─".join("─" * w for w in widths)]
    out += [line(row) for row in rows]
    if data.since:
        out.append("+ new  ~ changed  − removed  · unchanged")
    out += TEXT_LEGEND
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
    star = " ★" if entry.ours else ""  # where: listed under the table, and in the tooltip
    return f'<td class="{" ".join(classes)}" title="{esc(title)}">{mark}{esc(entry.label)}{star}</td>'


def render_html(data: t.TableData) -> str:
    """A self-contained HTML table: styles in style attributes (see `html.inline`), no JavaScript."""
    head = "".join(
        f'<th class="ember-key" title="{esc(k)}">{"<br>".join(esc(part) for part in split_key(k))}</th>'
        for k in data.keys
    )
    body = []
    for op in data.ops:
        cells = "".join(_cell_html(data.cell(op, key)) for key in data.keys)
        body.append(f'<tr><th class="ember-op">{_breakable_op(op)}</th>{cells}</tr>')
    legend = "".join(
        f'<div><span class="ember-swatch ember-{kind}">{esc(label)}</span>{esc(text)}</div>'
        for label, kind, text in LEGEND
    )
    legend += (
        '<div><span class="ember-swatch ember-ours">★</span>'
        "registered by the book's own code (a notebook cell or extension/csrc)</div>"
    )
    if data.since:
        legend += "<div>+ new, ~ changed, − removed since the snapshot; · unchanged</div>"
    ours = []
    for cell in _ours(data):
        entry = cell.before if cell.change == t.REMOVED else cell.entry
        assert entry is not None
        ours.append(
            f"<div><code>{esc(cell.op)}</code> @ {esc(cell.key)}: {esc(entry.label)} "
            f'<span class="ember-where">{_breakable(entry.location)}</span></div>'
        )
    if ours:
        legend += '<div class="ember-ours-list">★ registered by the book:' + "".join(ours) + "</div>"
    markup = (
        '<div class="ember-dispatch-table">'
        + f'<div class="ember-title">{esc(_title(data))}</div>'
        + '<table class="ember-grid"><thead><tr><th class="ember-op-head">operator</th>'
        + head
        + "</tr></thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        + f'<div class="ember-legend">{legend}</div>'
        + "</div>"
    )
    return inline(markup, _CSS)


def _breakable_op(op: str) -> str:
    """An operator's name with line-break chances after "::" and before its overload: "aten::set_.source_Storage"."""
    return "<wbr>".join(esc(piece) for piece in re.split(r"(?<=::)|(?=\.)", op))


def _breakable(location: str) -> str:
    """A registration site, "03_fallback.ipynb[cpu_fallback]:39", with line-break chances before "[" and "/"."""
    return "<wbr>".join(esc(piece) for piece in re.split(r"(?=[\[/])", location))


class DispatchTable(View):
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

    def render(self, data: t.TableData) -> str:
        """The HTML of other table data (the live controls re-read the dispatcher)."""
        return render_html(data)

    def error_html(self, message: str) -> str:
        return inline(
            f'<div class="ember-dispatch-table"><span class="ember-error">{esc(message)}</span></div>', _CSS
        )

    def live_view(self) -> dict[str, Any] | None:
        return interactive.table_view(self)
