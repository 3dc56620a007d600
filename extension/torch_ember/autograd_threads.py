"""Exiting after a backward on ember without SIGABRT (PyTorch 2.13's autograd device threads).

A backward on a device other than the CPU runs on the autograd engine's thread for that
device index, and every backward stashes a Python object (`contextvars` context) in the
thread-local state its graph task captures. The device thread may drop its reference to
the graph task just after the caller has returned; if the interpreter is finalizing by
then, releasing that Python object makes the thread take the GIL, Python ends the thread
with a forced unwind, and the unwind through a noexcept destructor aborts the process
("terminate called without an active exception"). Measured on 2 cores: 3 of 24 runs of a
three-line script (a backward on ember, then exit) aborted; with `drain` at exit, 0 of 24.

At exit, before finalizing, `drain` sends one trivial backward with no stashed object
through each ember device's thread: a device thread takes a task only after it has dropped
the previous one, so when the last returns no device thread still holds a graph task
carrying a Python object.
"""

from __future__ import annotations

import atexit
import sys
from pathlib import Path

import torch

__all__ = ["device_threads_started", "drain", "register"]


def device_threads_started() -> bool:
    """Whether the autograd engine started its device threads (named pt_autograd_N)."""
    tasks = Path("/proc/self/task")
    if not tasks.is_dir():
        return True  # cannot tell: assume they did
    for task in tasks.iterdir():
        try:
            if (task / "comm").read_text().startswith("pt_autograd_"):
                return True
        except OSError:
            continue  # the thread ended meanwhile
    return False


def drain(device_type: str, device_count: int) -> None:
    """One trivial backward per device, through the engine, with nothing stashed."""
    if not device_threads_started():
        return
    engine = torch.autograd.Variable._execution_engine  # type: ignore[attr-defined]
    for index in range(device_count):
        device = torch.device(device_type, index)
        leaf = torch.zeros((), device=device, requires_grad=True)
        # Not torch.autograd.backward: it would stash a context again.
        seed = torch.ones((), device=device)
        retain_graph = create_graph = False
        engine.run_backward(
            (leaf * 1,), (seed,), retain_graph, create_graph, (), allow_unreachable=True, accumulate_grad=True
        )


def register(device_type: str, device_count: int) -> None:
    """Drain the device threads when the interpreter exits (atexit runs before finalizing)."""

    def drain_at_exit() -> None:
        try:
            drain(device_type, device_count)
        except RuntimeError as error:  # a device in a bad state: exit anyway, and say so
            sys.stderr.write(f"{device_type}: could not drain autograd's device threads at exit: {error}\n")

    atexit.register(drain_at_exit)
