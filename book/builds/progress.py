"""A one-line live status for slow steps (compiling), ending in a summary line.

Interactively, the line ticks ("compiling … 4 s") and is then replaced in place
by the summary, followed by what this run did and how long it took
("✔ … is loaded (compiled in 4.6 s)"). In batch runs (EMBER_BOOK_BATCH=1:
executing the notebooks, nbval) only the summary is displayed: a saved output
must hold for every reader, and how long a build took, or whether it came from
the build cache, differs from one run (and machine) to the next.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from types import TracebackType


def _in_notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def batch_mode() -> bool:
    return os.environ.get("EMBER_BOOK_BATCH") == "1" or not _in_notebook()


class Status:
    """Context manager: `with Status("compiling ember") as s: ...; s.finish(text)`."""

    def __init__(self, doing: str, tick_seconds: float = 0.5) -> None:
        self.doing = doing
        self.tick_seconds = tick_seconds
        self.started = time.perf_counter()
        self._handle = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def __enter__(self) -> Status:
        self.started = time.perf_counter()
        if not batch_mode():
            from IPython.display import Pretty, display

            self._handle = display(Pretty(f"⏳ {self.doing} …"), display_id=True)
            self._thread = threading.Thread(target=self._tick, daemon=True)
            self._thread.start()
        return self

    def _tick(self) -> None:
        from IPython.display import Pretty

        while not self._stop.wait(self.tick_seconds):
            self._handle.update(Pretty(f"⏳ {self.doing} … {self.elapsed:.0f} s"))

    def _stop_ticking(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def finish(self, summary: str, show_in_batch: bool = True, detail: str | None = None) -> None:
        """Replace the live line by `summary` (or show it, in batch mode).

        `summary` is what every run of the cell shows: no duration, nothing
        that depends on the machine or its caches. `detail` ("compiled in
        4.6 s") is what only this run did; the live line shows it after the
        summary, in parentheses, and batch mode never does.

        One-time machine warm-ups pass show_in_batch=False: whether they happen
        depends on the machine's cache, not on the chapter.
        """
        self._stop_ticking()
        if self._handle is not None:
            from IPython.display import Pretty

            self._handle.update(Pretty(f"{summary} ({detail})" if detail else summary))
        elif _in_notebook() and show_in_batch:
            from IPython.display import Pretty, display

            display(Pretty(summary))
        elif os.environ.get("EMBER_BOOK_VERBOSE") == "1":
            print(f"{summary} ({detail})" if detail else summary, file=sys.stderr)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop_ticking()
        if exc is not None and self._handle is not None:
            from IPython.display import Pretty

            self._handle.update(Pretty(f"✘ {self.doing} failed after {self.elapsed:.1f} s"))
