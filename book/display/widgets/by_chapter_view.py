"""The by-chapter view of ember's dispatch table: `show_by_chapter()`.

Static output only (what the built book shows, what nbval compares): a short text summary and a
self-contained HTML block, one summary table and one closed ``<details>`` per chapter listing every
entry that chapter's code filled. ``<details>`` opens without JavaScript, so the page reads offline.
Data: `book.display.widgets.by_chapter`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from functools import cache

from book.display.widgets import by_chapter as b
from book.display.widgets import table as t
from book.display.widgets.html import MONO, OURS, SANS, esc, inline, kind_css
from book.display.widgets.view import View
from book.parts.regions import chapter_path, label, notebook_stem

_SHARED_WORD = {t.FALLBACK: "backend fallback", t.FALLTHROUGH: "fallthrough"}

_CSS = f"""
.ember-by-chapter {{ font-family: {SANS}; font-size: 13px;
  color: #111827; background: #ffffff; margin: 4px 0; overflow-x: auto; }}
.ember-by-chapter .ember-title {{ font-weight: 600; margin: 2px 0 6px 0; }}
.ember-by-chapter table {{ border-collapse: collapse; margin: 2px 0 6px 0; }}
.ember-by-chapter th, .ember-by-chapter td {{ border: 1px solid #d1d5db; padding: 2px 8px; text-align: left;
  vertical-align: top; }}
.ember-by-chapter thead th {{ background: #f9fafb; font-weight: 600; white-space: nowrap; }}
.ember-by-chapter td.ember-num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.ember-by-chapter code {{ font-family: {MONO}; font-size: 12px; }}
.ember-by-chapter details {{ margin: 3px 0; }}
.ember-by-chapter summary {{ cursor: pointer; color: {OURS}; font-weight: 600; }}
{kind_css(".ember-by-chapter td.ember-kind")}
.ember-by-chapter .ember-note {{ font-size: 12px; color: #374151; margin-top: 4px; }}
"""


@cache
def chapter_title(slug: str) -> str:
    """The first heading of a chapter's notebook ("Autograd: gradients on ember"), or the slug."""
    try:
        cells = json.loads(chapter_path(slug).read_text())["cells"]
    except (LookupError, OSError, ValueError, KeyError):
        return slug
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return slug


def _shared_text(shared: b.Shared) -> str:
    revised = f", revised in {label(shared.revised_in)}" if shared.revised_in else ""
    return (
        f"{_SHARED_WORD[shared.entry.kind]} at {shared.key} ({shared.part}{revised}), "
        f"serves {shared.serves} operators"
    )


def _revised_text(group: b.ChapterGroup) -> str:
    """Its entries that later chapters revised: "31 in 14"."""
    return ", ".join(f"{count} in {label(chapter)}" for chapter, count in group.revised.items()) or "—"


def render_text(data: b.ByChapter) -> str:
    """One line per chapter: kernels, operators, entries revised later, keys; its fallbacks below it."""
    head = ["chapter", "kernels", "operators", "revised", "keys"]
    rows = [
        [
            notebook_stem(slug),
            str(len(group.kernels)),
            str(len(group.operators)),
            _revised_text(group),
            ", ".join(key for key in group.keys if any(f.key == key for f in group.kernels)) or "—",
        ]
        for slug, group in data.groups.items()
    ]
    widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]

    def line(cells: list[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    out = [
        f"ember's dispatch table by chapter: {data.operators} operators at {len(data.keys)} keys of ember",
        line(head),
    ]
    for row, group in zip(rows, data.groups.values(), strict=True):
        out.append(line(row))
        out += [f"{' ' * widths[0]}  + {_shared_text(shared)}" for shared in group.shared]
    out.append(
        f"PyTorch's own entries at PrivateUse1 (composite kernels): {data.not_ours.get('PrivateUse1', 0)}"
    )
    if data.unattributed:
        out.append(f"the book's, with no chapter in their location: {len(data.unattributed)}")
    return "\n".join(out)


def _revised_cell(chapter: str | None) -> str:
    return f"revised in {esc(label(chapter))}" if chapter else ""


def _kernel_rows(group: b.ChapterGroup) -> str:
    rows = []
    for filled in sorted(group.kernels, key=lambda f: (f.op, b.EMBER_KEYS.index(f.key))):
        entry = filled.entry
        rows.append(
            f"<tr><td><code>{esc(filled.op)}</code></td><td>{esc(filled.key)}</td>"
            f'<td class="ember-kind ember-{entry.kind}" title="{esc(entry.description)}">{esc(entry.label)}</td>'
            f"<td><code>{esc(filled.part)}</code></td><td>{_revised_cell(filled.revised_in)}</td></tr>"
        )
    for shared in group.shared:
        rows.append(
            f"<tr><td><i>every operator without a kernel ({shared.serves})</i></td><td>{esc(shared.key)}</td>"
            f'<td class="ember-kind ember-{shared.entry.kind}">{esc(shared.entry.label)}</td>'
            f"<td><code>{esc(shared.part)}</code></td><td>{_revised_cell(shared.revised_in)}</td></tr>"
        )
    return "".join(rows)


def render_html(data: b.ByChapter) -> str:
    """Self-contained HTML: the summary table, then a closed <details> per chapter."""
    summary_rows = []
    for slug, group in data.groups.items():
        shared = "; ".join(_shared_text(s) for s in group.shared) or "—"
        summary_rows.append(
            f"<tr><td><code>{esc(label(slug))}</code> {esc(chapter_title(slug))}</td>"
            f'<td class="ember-num">{len(group.kernels)}</td><td class="ember-num">{len(group.operators)}</td>'
            f"<td>{esc(_revised_text(group))}</td><td>{esc(', '.join(group.keys))}</td><td>{esc(shared)}</td></tr>"
        )
    details = []
    for slug, group in data.groups.items():
        noun = "entry" if len(group.kernels) + len(group.shared) == 1 else "entries"
        details.append(
            f"<details><summary>{esc(label(slug))} {esc(chapter_title(slug))}: "
            f"{len(group.kernels) + len(group.shared)} {noun}, parts {esc(', '.join(group.parts))}</summary>"
            "<table><thead><tr><th>operator</th><th>key</th><th>entry</th><th>part</th>"
            "<th>revised</th></tr></thead>"
            f"<tbody>{_kernel_rows(group)}</tbody></table></details>"
        )
    others = data.not_ours.get("PrivateUse1", 0)
    note = (
        "Read from the live dispatcher: each entry's <code>registered at</code> location names the notebook "
        "and part whose code registered it. An entry stays with the chapter that introduced it; where a later "
        "chapter revised its part (the location names that chapter), it is marked revised there. "
        f"At PrivateUse1, {others} operators run PyTorch's own composite kernels, which call ember's. "
        "At the sparse, quantized and nested keys only kernels registered at the key itself are listed."
    )
    if data.unattributed:
        note += f" The book's entries with no chapter in their location: {len(data.unattributed)}."
    markup = (
        '<div class="ember-by-chapter">'
        + f'<div class="ember-title">ember\'s dispatch table by chapter: {data.operators} operators, '
        + f"keys {esc(', '.join(data.keys))}</div>"
        + "<table><thead><tr><th>chapter</th><th>kernels</th><th>operators</th><th>revised later</th><th>keys</th>"
        + "<th>fallbacks and fallthroughs</th></tr></thead><tbody>"
        + "".join(summary_rows)
        + "</tbody></table>"
        + "".join(details)
        + f'<div class="ember-note">{note}</div></div>'
    )
    return inline(markup, _CSS)


class DispatchTableByChapter(View):
    """The displayed widget. Reads the live dispatcher once, when created."""

    def __init__(self, ops: Iterable[str] | None = None, keys: Iterable[str] = b.EMBER_KEYS) -> None:
        self.data = b.read(ops, keys)

    def text(self) -> str:
        return render_text(self.data)

    def html(self) -> str:
        return render_html(self.data)
