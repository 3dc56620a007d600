"""The live (ipywidgets) view of the dispatch table, for a reader's running kernel.

It is offered only in a live Jupyter kernel with ipywidgets, and not in batch
runs (EMBER_BOOK_BATCH=1: executing the notebooks for the book, nbval). A
widget view in a saved notebook shows nothing without its kernel, and its
random model id would change the notebook on every run; the static HTML the
same output carries is what the built book shows.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from book.builds.progress import batch_mode
from book.display.widgets import table as t


class TableView(Protocol):
    """What the controls need of a dispatch-table view (`book.display.widgets.table_view.DispatchTable`)."""

    patterns: list[str]
    since: t.Snapshot | None
    data: t.TableData

    def html(self) -> str: ...

    def render(self, data: t.TableData) -> str: ...

    def error_html(self, message: str) -> str: ...


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def live() -> bool:
    if batch_mode():  # also False outside a Jupyter kernel
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def split_patterns(text: str) -> list[str]:
    return [p for p in re.split(r"[\s,]+", text) if p]


def controls(table: TableView) -> Any:
    """An ipywidgets VBox: operator patterns, keys, re-read; below them the live HTML table."""
    import ipywidgets as w

    ops = w.Text(
        value=", ".join(table.patterns),
        description="operators",
        placeholder="aten::add.Tensor, aten::empty*",
        continuous_update=False,
        layout=w.Layout(width="70%"),
    )
    keys = w.TagsInput(
        value=list(table.data.keys), allowed_tags=list(t.runtime_keys()), allow_duplicates=False
    )
    reread = w.Button(description="re-read", tooltip="read the live dispatcher again")
    only_changes = w.Checkbox(value=True, description="only what changed since the snapshot", indent=False)
    output = w.HTML(value=table.html())

    def render(_: object = None) -> None:
        since = table.since if only_changes.value else None
        try:
            data = t.table_data(split_patterns(ops.value), keys.value or t.DEFAULT_KEYS, since)
        except ValueError as error:
            output.value = table.error_html(str(error))
            return
        output.value = table.render(data)

    ops.observe(render, names="value")
    keys.observe(render, names="value")
    only_changes.observe(render, names="value")
    reread.on_click(render)
    rows: list[Any] = [w.HBox([ops, reread]), w.HBox([w.Label("keys"), keys])]
    if table.since is not None:
        rows.append(only_changes)
    box = w.VBox([*rows, output])
    box.ember_controls = {"ops": ops, "keys": keys, "only_changes": only_changes, "output": output}
    return box


def table_view(table: TableView) -> dict[str, Any] | None:
    """{widget-view mimetype: ...} for `controls(table)`, or None when not in a live kernel."""
    if not live():
        return None
    box = controls(table)
    return {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": box.model_id}}
