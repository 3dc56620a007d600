"""`book.run_isolated(code)`: run code that may crash in a fresh Python process.

Some lessons need a crash: host code touching device memory is a SIGSEGV, and
so is a storage created with no allocator registered. A crash in the reader's
kernel would take the whole notebook down, so such code runs in a child
process that starts in the reader's state: the same ember driver file and the
same chapter build loaded (never recompiled), and the device module registered
if the reader registered it. What comes back is the child's output and how it
ended, both deterministic.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass

import torch

from book.builds import builder, toolchain
from book.builds import driver as ember_driver

DEFAULT_TIMEOUT_SECONDS = 120.0

# The child's first lines. The user's code runs last, compiled as "<isolated>"
# so that tracebacks name its own line numbers.
#
# After the code, the child leaves with os._exit: no interpreter shutdown. After a
# backward on ember, PyTorch's autograd device threads are still alive when Python
# finalizes, and one of them can die there with "terminate called without an active
# exception" (SIGABRT), a crash that is no part of the lesson. The status is what
# Python's own exit would give: 0, 1 with the traceback printed for an uncaught
# exception, sys.exit's code. A crash inside the code (SIGSEGV) still kills the child
# before any of this runs.
_READER_STATE = """\
import ctypes, os, pathlib, signal, sys, threading
import torch
from book.builds import builder  # the book's build state, as in the reader's process: nothing loaded
from book.builds import driver as book_driver

# The reader's driver file, used as is (the child never builds anything), loaded
# globally so the build resolves its em* symbols against this copy, exactly as in
# the reader's process. `driver` is its ctypes library, argument types set.
book_driver.use_library(pathlib.Path({driver!r}))
driver = book_driver.driver().lib
if {build!r}:
    torch.ops.load_library({build!r})
if {rename!r}:  # chapter 13 on: the backend's name, as the reader's process registered it
    torch.utils.rename_privateuse1_backend({backend!r})
if {register!r}:
    torch._register_device_module({backend!r}, book_driver.device_module())
    if {build!r}:  # what the device module calls in the backend itself (memory history)
        book_driver.device_module().backend.attach_backend(ctypes.CDLL({build!r}))
"""

_PRELUDE = (
    _READER_STATE
    + """\
try:
    exec(compile({code!r}, "<isolated>", "exec"), {{"__name__": "__main__", "torch": torch,
         "ctypes": ctypes, "driver": driver}})
except SystemExit as stop:  # sys.exit(code): the status Python's exit would give
    status = 0 if stop.code is None else stop.code if isinstance(stop.code, int) else 1
    if status == 1 and not isinstance(stop.code, int):
        print(stop.code, file=sys.stderr)
except BaseException as error:  # printed as Python prints an uncaught exception
    sys.excepthook(*sys.exc_info())
    status = 1
    if isinstance(error, KeyboardInterrupt):  # Python's exit then re-raises SIGINT
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
else:
    status = 0
for thread in threading.enumerate():  # as Python's exit does: wait for non-daemon threads
    if thread is not threading.main_thread() and not thread.daemon:
        thread.join()
sys.stdout.flush()
sys.stderr.flush()
os._exit(status)
"""
)


def reader_state() -> dict[str, object]:
    """What a child needs to start in the reader's state (the fields of _READER_STATE)."""
    build = builder.loaded()
    backend = torch._C._get_privateuse1_backend_name()
    return {
        "driver": str(toolchain.driver_library()),
        "build": str(build.library) if build is not None else "",
        "rename": backend != "privateuseone",
        "register": getattr(torch, backend, None) is ember_driver.device_module(),
        "backend": backend,
    }


def reader_state_script() -> str:
    """Python source that puts a fresh process in the reader's state: the same driver file and
    build loaded, the backend named and its device module registered as in the reader's process.
    """
    return _READER_STATE.format(**reader_state())


@dataclass(frozen=True)
class IsolatedResult:
    """How a child process ended, and what it printed."""

    returncode: int | None  # None: it was stopped after the timeout
    stdout: str
    stderr: str

    @property
    def signal(self) -> str | None:
        """The name of the signal that killed the child, e.g. "SIGSEGV"."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def ended(self) -> str:
        if self.returncode is None:
            return "stopped: it did not finish in time"
        if self.signal is not None:
            return f"killed by {self.signal}"
        return f"exited with code {self.returncode}"

    def __str__(self) -> str:
        text = self.stdout + self.stderr
        if text and not text.endswith("\n"):
            text += "\n"
        return f"{text}[child process {self.ended}]"

    def _repr_pretty_(self, printer: object, cycle: bool) -> None:
        printer.text(str(self))  # type: ignore[attr-defined]


def run_isolated(
    code: str,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    env: dict[str, str] | None = None,
) -> IsolatedResult:
    """Run `code` in a fresh Python process that has the current ember build loaded.

    The code sees `torch`, `ctypes` and `driver` (the ember driver as a
    ctypes library, with the argument types of its entry points set). `env` adds
    environment variables for the child, such as settings read once at startup
    (`PYTORCH_ALLOC_CONF`).
    """
    script = _PRELUDE.format(**reader_state(), code=code)
    # TORCH_DEVICE_BACKEND_AUTOLOAD=0: the child's `import torch` must not load the installed
    # torch_ember next to the build (book/autoload.py; `import book` set it here already).
    environment = dict(os.environ, PYTHONUNBUFFERED="1", TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    environment.pop("PYTHONFAULTHANDLER", None)  # its report holds addresses and thread ids
    environment.update(env or {})
    try:
        child = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            check=False,
            text=True,
            timeout=timeout,
            env=environment,
        )
    except subprocess.TimeoutExpired as stopped:
        return IsolatedResult(None, _text(stopped.stdout), _text(stopped.stderr))
    return IsolatedResult(child.returncode, child.stdout, child.stderr)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""
