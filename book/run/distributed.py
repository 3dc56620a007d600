"""`book.torchrun(code)` and `book.run_ranks(code)`: run a worker script on several ranks.

Each rank is a fresh Python process in the reader's state (`book.run.isolated`): the same driver file
and chapter build loaded, the backend named "ember", its device module registered, and eccl
registered with torch.distributed (`torch_ember/distributed.py`, loaded by path). The worker script
is written to a scratch folder and run from there, so tracebacks name it by its file name alone.

`torchrun` starts the ranks the standard way, with PyTorch's launcher (`torch.distributed.run`,
a rendezvous on a free port). `run_ranks` starts them itself, with the environment variables
`init_process_group`'s env:// rendezvous reads: torchrun stops every rank as soon as one fails,
which is what a job wants, but a lesson about what the survivors see needs them to live on.

What comes back is each rank's output, in rank order, and how each ended: deterministic, whatever
order the ranks printed in. Files the worker writes in its folder (`*.json`) come back too. While
the ranks run, a notebook shows a live line per rank, its latest output (`_Watch`), as a build cell
does; when they end it is replaced by one line saying how they ended, the same in every run.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from book.builds.progress import batch_mode
from book.run.isolated import reader_state, reader_state_script
from book.text import wrapped

DEFAULT_TIMEOUT_SECONDS = 180.0

# Runs as each rank: the reader's state, eccl registered, then the worker, its output in a file
# per rank. The rank leaves with os._exit, as book.run_isolated's children do (PyTorch 2.13's
# autograd threads can abort an interpreter shutdown after a backward on ember).
_RANK_MAIN = """
import traceback
from book.builds.extension_modules import load as _load_extension_module
_load_extension_module("distributed").register(book_driver.device_module().backend.entry)
if {build!r}:  # torch.compile on ember, registered as `import torch_ember` registers it
    _compiler = book_driver.load_package("compiler")
    from ember_book.compiler import deferred as _deferred
    _deferred.run_after_import(
        lambda: _compiler.device_interface.register(book_driver.device_module()), ["torch._dynamo"]
    )
    _deferred.run_after_import(
        lambda: _compiler.register(book_driver.device_module(), {build!r})
    )
_rank = os.environ["RANK"]
sys.stdout = open(f"rank{{_rank}}.out", "w", buffering=1)
sys.stderr = open(f"rank{{_rank}}.err", "w", buffering=1)
_status = 0
try:
    _source = pathlib.Path({script!r}).read_text()
    exec(compile(_source, {script!r}, "exec"), {{"__name__": "__main__", "torch": torch}})
except SystemExit as stop:
    _status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
except BaseException:
    traceback.print_exc()
    _status = 1
sys.stdout.flush()
sys.stderr.flush()
pathlib.Path(f"rank{{_rank}}.status").write_text(str(_status))
os._exit(_status)
"""


@dataclass(frozen=True)
class Rank:
    """One rank's output, and how it ended."""

    rank: int
    stdout: str
    stderr: str
    status: int | None  # what the worker returned; None: the process died before it could say
    signal: str | None = None  # the signal that ended it ("SIGKILL"), when known (run_ranks)

    @property
    def ok(self) -> bool:
        return self.status == 0

    @property
    def error(self) -> str:
        """The last line of the rank's traceback ("" if it raised nothing)."""
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if self.status not in (0, None) and lines else ""


@dataclass(frozen=True)
class Ranks:
    """What the ranks of one run printed, in rank order."""

    ranks: list[Rank]
    files: dict[str, str] = field(default_factory=dict)  # the *.json files the worker wrote
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(rank.ok for rank in self.ranks)

    def __str__(self) -> str:
        parts = []
        for rank in self.ranks:
            text = rank.stdout.rstrip("\n")
            if rank.status is None and rank.signal:
                ended = f"ended without a word: killed by {rank.signal}"
            elif rank.status is None:
                ended = "ended without a word: the process died"
            elif rank.status != 0:
                ended = f"failed: {rank.error}"
            else:
                ended = ""
            lines = [f"[rank {rank.rank}]"] + ([text] if text else []) + ([ended] if ended else [])
            parts.append("\n".join(lines))
        if self.timed_out:
            parts.append("[stopped: the ranks did not finish in time]")
        return wrapped("\n".join(parts))

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _environment(env: dict[str, str] | None) -> dict[str, str]:
    environment = dict(
        os.environ,
        PYTHONUNBUFFERED="1",
        TORCH_DEVICE_BACKEND_AUTOLOAD="0",  # the installed torch_ember stays out (book/autoload.py)
        OMP_NUM_THREADS="1",  # what torchrun sets (and warns about, when it has to)
    )
    environment.pop("PYTHONFAULTHANDLER", None)
    environment.update(env or {})
    return environment


def _prepare(folder: Path, code: str, script: str) -> Path:
    (folder / script).write_text(code)
    main = folder / "_rank_main.py"
    main.write_text(reader_state_script() + _RANK_MAIN.format(script=script, build=reader_state()["build"]))
    return main


def _collect(folder: Path, nproc: int, timed_out: bool, signals: dict[int, str] | None = None) -> Ranks:
    ranks = []
    for rank in range(nproc):

        def read(suffix: str, rank: int = rank) -> str:
            path = folder / f"rank{rank}.{suffix}"
            return path.read_text() if path.exists() else ""

        status = read("status")
        code = int(status) if status else None
        ranks.append(Rank(rank, read("out"), read("err"), code, (signals or {}).get(rank)))
    files = {path.name: path.read_text() for path in sorted(folder.glob("*.json"))}
    return Ranks(ranks, files, timed_out)


def torchrun(
    code: str,
    nproc: int = 2,
    *,
    script: str = "worker.py",
    env: dict[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Ranks:
    """Run `code`, saved as `script`, on `nproc` ranks started by torchrun on this machine."""
    with tempfile.TemporaryDirectory(prefix="ember-ranks-") as scratch:
        folder = Path(scratch)
        main = _prepare(folder, code, script)
        command = [
            sys.executable, "-m", "torch.distributed.run",
            "--standalone", f"--nproc-per-node={nproc}", main.name,
        ]  # fmt: skip
        # A session of its own: after the timeout, the launcher and every rank it started are stopped.
        launcher = subprocess.Popen(
            command,
            cwd=folder,
            env=_environment(env),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        watch = _Watch(folder, nproc, "started by torchrun").start()
        ranks = _collect(folder, nproc, _wait_or_kill([launcher], timeout, watch))
        watch.ended(ranks)
        return ranks


class _Watch:
    """The live view of running ranks, in a notebook: a line per rank showing the last line it
    printed, redrawn every half second, then replaced by a summary of how the ranks ended. The
    summary is shown in batch runs too (`book.builds.progress`), and holds nothing that changes per run;
    the live lines are never saved."""

    def __init__(self, folder: Path, nproc: int, how: str) -> None:
        self.folder, self.nproc, self.how = folder, nproc, how
        self.started = time.perf_counter()
        self._handle = None
        self._live = not batch_mode()
        self._in_notebook = self._live or _notebook()

    def start(self) -> _Watch:
        if self._live:
            from IPython.display import Pretty, display

            self._handle = display(Pretty(self._lines()), display_id=True)
        return self

    def _last_line(self, rank: int) -> str:
        path = self.folder / f"rank{rank}.out"
        try:
            lines = [line for line in path.read_text().splitlines() if line.strip()]
        except OSError:
            lines = []
        line = lines[-1] if lines else "starting …"
        return line if len(line) <= 70 else line[:69] + "…"

    def _lines(self) -> str:
        elapsed = time.perf_counter() - self.started
        head = f"⏳ {self.nproc} ranks, {self.how} … {elapsed:.0f} s"
        return "\n".join([head] + [f"  rank {r}: {self._last_line(r)}" for r in range(self.nproc)])

    def tick(self) -> None:
        if self._handle is not None:
            from IPython.display import Pretty

            self._handle.update(Pretty(self._lines()))

    def ended(self, ranks: Ranks) -> None:
        def how(rank: Rank) -> str:
            if rank.status is not None:
                return f"rank {rank.rank} failed"
            return (
                f"rank {rank.rank} was killed by {rank.signal}" if rank.signal else f"rank {rank.rank} died"
            )

        if ranks.timed_out:
            summary = f"✘ {self.nproc} ranks, {self.how}: stopped, they did not finish in time"
        elif not ranks.ok and self.how == "started by torchrun":
            # torchrun stops the other ranks when one fails, at a moment that varies: say no more.
            summary = f"✘ {self.nproc} ranks, {self.how}: not every rank finished"
        elif not ranks.ok:
            summary = f"✘ {self.nproc} ranks, {self.how}: " + ", ".join(
                how(r) for r in ranks.ranks if not r.ok
            )
        else:
            summary = f"✔ {self.nproc} ranks, {self.how}: every rank finished"
        if self._handle is not None:
            from IPython.display import Pretty

            self._handle.update(Pretty(summary))
        elif self._in_notebook:
            from IPython.display import Pretty, display

            display(Pretty(summary))


def _notebook() -> bool:
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def _wait_or_kill(
    processes: list[subprocess.Popen[bytes]], timeout: float, watch: _Watch | None = None
) -> bool:
    """Wait for the processes, each the leader of its own session, for `timeout` seconds in all,
    redrawing `watch` meanwhile; kill the sessions of those still running then. True if any was
    killed."""
    timed_out = False
    deadline = time.monotonic() + timeout
    for process in processes:
        while True:
            try:
                process.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
                break
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline:
                    if watch is not None:
                        watch.tick()
                    continue
                timed_out = True
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                break
    return timed_out


def _signal_name(returncode: int | None) -> str | None:
    """The signal that ended a process (Popen's negative return code), by name."""
    if returncode is None or returncode >= 0:
        return None
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_ranks(
    code: str,
    nproc: int = 2,
    *,
    script: str = "worker.py",
    env: dict[str, str] | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
) -> Ranks:
    """Run `code` on `nproc` ranks started as plain processes, with the env:// rendezvous's
    variables (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE): no launcher stops the survivors when
    a rank dies. Every rank is stopped after `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="ember-ranks-") as scratch:
        folder = Path(scratch)
        main = _prepare(folder, code, script)
        port = str(_free_port())
        processes = []
        for rank in range(nproc):
            rank_env = dict(
                env or {},
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(nproc),
                LOCAL_WORLD_SIZE=str(nproc),
            )
            processes.append(
                subprocess.Popen(
                    [sys.executable, main.name],
                    cwd=folder,
                    env=_environment(rank_env),
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
            )
        watch = _Watch(folder, nproc, "started as processes").start()
        timed_out = _wait_or_kill(processes, timeout, watch)
        # A rank the timeout stopped was killed by us, not by what the lesson is about.
        signals = {} if timed_out else {r: _signal_name(p.returncode) for r, p in enumerate(processes)}
        ranks = _collect(folder, nproc, timed_out, {r: name for r, name in signals.items() if name})
        watch.ended(ranks)
        return ranks
