"""`book.torchrun(code)` and `book.run_ranks(code)`: run a worker script on several ranks.

Each rank is a fresh Python process in the reader's state (`book.isolated`): the same driver file
and chapter build loaded, the backend named "ember", its device module registered, and eccl
registered with torch.distributed (`torch_ember/distributed.py`, loaded by path). The worker script
is written to a scratch folder and run from there, so tracebacks name it by its file name alone.

`torchrun` starts the ranks the standard way, with PyTorch's launcher (`torch.distributed.run`,
a rendezvous on a free port). `run_ranks` starts them itself, with the environment variables
`init_process_group`'s env:// rendezvous reads: torchrun stops every rank as soon as one fails,
which is what a job wants, but a lesson about what the survivors see needs them to live on.

What comes back is each rank's output, in rank order, and how each ended: deterministic, whatever
order the ranks printed in. Files the worker writes in its folder (`*.json`) come back too.
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

from book.isolated import reader_state, reader_state_script
from book.text import wrapped

DEFAULT_TIMEOUT_SECONDS = 180.0

# Runs as each rank: the reader's state, eccl registered, then the worker, its output in a file
# per rank. The rank leaves with os._exit, as book.run_isolated's children do (PyTorch 2.13's
# autograd threads can abort an interpreter shutdown after a backward on ember).
_RANK_MAIN = """
import traceback
from book.extension_modules import load as _load_extension_module
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
            if rank.status is None:
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


def _collect(folder: Path, nproc: int, timed_out: bool) -> Ranks:
    ranks = []
    for rank in range(nproc):

        def read(suffix: str, rank: int = rank) -> str:
            path = folder / f"rank{rank}.{suffix}"
            return path.read_text() if path.exists() else ""

        status = read("status")
        ranks.append(Rank(rank, read("out"), read("err"), int(status) if status else None))
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
        timed_out = _wait_or_kill([launcher], timeout)
        return _collect(folder, nproc, timed_out)


def _wait_or_kill(processes: list[subprocess.Popen[bytes]], timeout: float) -> bool:
    """Wait for the processes, each the leader of its own session, for `timeout` seconds in all;
    kill the sessions of those still running then. True if any was killed."""
    timed_out = False
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    return timed_out


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
        return _collect(folder, nproc, _wait_or_kill(processes, timeout))
