"""How `book.run_isolated`'s child ends: its status is the code's, not the interpreter shutdown's.

The child leaves with os._exit once the code has run. Python's own shutdown can abort
(SIGABRT, "terminate called without an active exception") after a backward on ember:
PyTorch's autograd device threads outlive the interpreter. The basic cases (output,
traceback, SIGSEGV, timeout) are in test_chapter01_support.py.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator

import pytest

from book import run_isolated
from book.builds import builder
from book.run.chapter import Chapter


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    """Chapter 03's build: the CPU fallback runs every operator, so backward works on ember."""
    yield Chapter.of("fallback").build()
    gc.collect()  # let the next module's build unload this one


BACKWARD = """
torch.utils.rename_privateuse1_backend("privateuseone")
x = torch.ones(3, device="privateuseone", requires_grad=True)
(x * 2).sum().backward()
print("grad", x.grad.cpu().tolist())
"""

# Without os._exit, about a third to a half of these children were killed by SIGABRT
# at shutdown (measured on 2 cores); 8 runs all ending well is then a 1-2% chance.
RUNS = 8


def test_a_backward_on_ember_exits_cleanly_every_time() -> None:
    endings = []
    for _ in range(RUNS):
        result = run_isolated(BACKWARD)
        assert result.stdout == "grad [2.0, 2.0, 2.0]\n", str(result)
        endings.append(result.ended)
    assert endings == ["exited with code 0"] * RUNS, endings


def test_the_child_ends_without_interpreter_shutdown() -> None:
    # atexit handlers belong to the shutdown the child skips.
    result = run_isolated("import atexit\natexit.register(print, 'at exit')\nprint('done')")
    assert result.ok, str(result)
    assert result.stdout == "done\n"


def test_output_without_a_newline_is_flushed() -> None:
    result = run_isolated("import sys\nprint('out', end='')\nsys.stderr.write('err')")
    assert result.ok, str(result)
    assert (result.stdout, result.stderr) == ("out", "err")


@pytest.mark.parametrize(
    ("code", "returncode", "stderr"),
    [
        ("import sys\nsys.exit()", 0, ""),
        ("import sys\nsys.exit(3)", 3, ""),
        ("raise SystemExit(0)", 0, ""),
        ("import sys\nsys.exit('bad input')", 1, "bad input\n"),
    ],
)
def test_sys_exit_gives_its_status(code: str, returncode: int, stderr: str) -> None:
    result = run_isolated(code)
    assert result.returncode == returncode
    assert result.stderr == stderr


def test_an_exception_after_a_backward_is_exit_code_1_with_its_traceback() -> None:
    result = run_isolated(BACKWARD + "raise ValueError('after backward')\n")
    assert result.returncode == 1, str(result)
    assert 'File "<isolated>", line 6, in <module>' in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: after backward")


def test_an_uncaught_keyboard_interrupt_ends_by_sigint_as_in_python() -> None:
    result = run_isolated("raise KeyboardInterrupt")
    assert result.signal == "SIGINT"
    assert result.stderr.rstrip().endswith("KeyboardInterrupt")


def test_non_daemon_threads_are_waited_for() -> None:
    result = run_isolated(
        "import threading, time\n"
        "def late():\n"
        "    time.sleep(0.5)\n"
        "    print('thread done')\n"
        "threading.Thread(target=late).start()\n"
        "print('main done')\n"
    )
    assert result.ok, str(result)
    assert result.stdout.splitlines() == ["main done", "thread done"]


def test_a_crash_still_reports_its_signal() -> None:
    result = run_isolated("import ctypes\nprint('before')\nctypes.string_at(0)\nprint('not reached')")
    assert result.signal == "SIGSEGV"
    assert result.stdout == "before\n"


def test_the_child_gets_the_extra_environment_and_the_parent_keeps_its_own() -> None:
    code = "import os\nprint(os.environ.get('PYTORCH_ALLOC_CONF'))"
    result = run_isolated(code, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"})
    assert result.stdout == "expandable_segments:True\n", str(result)
    assert "PYTORCH_ALLOC_CONF" not in os.environ
