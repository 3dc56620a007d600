"""The book's widgets, all read from the live dispatcher, never scripted.

* ``show_table(ops, keys=None, since=None)``: the dispatch table, what the
  dispatcher holds for some operators at some dispatch keys (``snapshot(ops)``
  records it, ``since=`` shows only what changed after). Data: `table.entry`.
* ``trace(fn)``: runs fn and shows each operator call, the keys it was
  dispatched through (where it entered, observed; the redispatches after
  that, inferred from the dispatch table and marked so), the kernel that ran,
  and the ember device's mallocs, frees, copies and launches. Data:
  `dispatch_trace` (the returned object is a `Trace`); views: `trace_view`.
* ``show_by_chapter()``: the finished backend's dispatch table at ember's keys,
  grouped by the chapter whose code registered each entry (read from the
  dispatcher's ``registered at`` locations). Data: `by_chapter`; view:
  `by_chapter_view`.
"""

from __future__ import annotations

from collections.abc import Iterable

from book.display.widgets.by_chapter_view import DispatchTableByChapter
from book.display.widgets.dispatch_trace import (
    BACKEND_FALLBACK,
    COMPOSITE_EXPLICIT,
    COMPOSITE_EXPLICIT_NF,
    COMPOSITE_IMPLICIT,
    CPU_KERNEL,
    EMBER_KERNEL,
    MISSING,
    OTHER_KERNEL,
    Call,
    DeviceEvent,
    Step,
    Trace,
)
from book.display.widgets.table import Entry, Snapshot, entry, snapshot
from book.display.widgets.table_view import DispatchTable
from book.display.widgets.trace_view import DispatchTrace, trace

__all__ = [
    "BACKEND_FALLBACK",
    "COMPOSITE_EXPLICIT",
    "COMPOSITE_EXPLICIT_NF",
    "COMPOSITE_IMPLICIT",
    "CPU_KERNEL",
    "EMBER_KERNEL",
    "MISSING",
    "OTHER_KERNEL",
    "Call",
    "DeviceEvent",
    "DispatchTable",
    "DispatchTableByChapter",
    "DispatchTrace",
    "Entry",
    "Snapshot",
    "Step",
    "Trace",
    "entry",
    "show_by_chapter",
    "show_table",
    "snapshot",
    "trace",
]


def show_table(
    ops: str | Iterable[str], keys: Iterable[str] | None = None, since: Snapshot | None = None
) -> None:
    """Display the dispatch table of `ops` (names or glob patterns like "aten::empty*").

    Columns are `keys` (default: `table.DEFAULT_KEYS`). With ``since=`` a
    `snapshot`, only the cells that changed since then are filled in. In a
    live notebook, controls let you pick other operators and keys. Outside
    IPython the text grid is printed.
    """
    table = DispatchTable(ops, keys, since)
    try:
        from IPython import get_ipython
        from IPython.display import display
    except ImportError:
        print(table.text())
        return
    if get_ipython() is None:
        print(table.text())
        return
    display(table)


def show_by_chapter(ops: Iterable[str] | None = None) -> DispatchTableByChapter:
    """The dispatch table of every operator (or `ops`) at ember's keys, grouped by chapter.

    Returned, so that a cell ending with it displays it (text outside IPython).
    """
    return DispatchTableByChapter(ops)
