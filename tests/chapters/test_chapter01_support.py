"""Chapter 01's helpers: `book.run_isolated` and the device module (the package's own, `book.device_module()`)."""

from __future__ import annotations
import __future__

from pathlib import Path

import pytest
import torch

import book
from book.builds import builder
from book.builds import driver as ember_driver
from book.run import sync
from book.run.chapter import Chapter


@pytest.fixture(scope="module")
def chapter01() -> builder.Build:
    """Chapter 01's backend (guard and allocator), loaded, with the device module registered."""
    return Chapter.of("allocator").build()


# -- run_isolated ----------------------------------------------------------------------------


def test_a_normal_run_returns_its_stdout_and_exit_code_0(chapter01: builder.Build) -> None:
    result = book.run_isolated("print('hello from the child')")
    assert result.returncode == 0
    assert result.ok and result.signal is None
    assert result.stdout == "hello from the child\n"
    assert result.ended == "exited with code 0"


def test_an_exception_is_a_nonzero_exit_with_its_traceback(chapter01: builder.Build) -> None:
    result = book.run_isolated("raise ValueError('nope')")
    assert result.returncode == 1
    assert 'File "<isolated>", line 1' in result.stderr
    assert result.stderr.rstrip().endswith("ValueError: nope")


def test_a_host_read_of_device_memory_is_reported_as_sigsegv(chapter01: builder.Build) -> None:
    result = book.run_isolated(
        "buffer = ctypes.c_void_p()\n"
        "assert driver.emMalloc(ctypes.byref(buffer), 16) == 0\n"
        "print('allocated')\n"
        "ctypes.string_at(buffer, 16)\n"
        "print('not reached')\n"
    )
    assert result.signal == "SIGSEGV"
    assert result.returncode == -11
    assert result.stdout == "allocated\n"
    assert str(result).endswith("[child process killed by SIGSEGV]")


def test_the_child_uses_the_loaded_build_and_compiles_nothing(
    chapter01: builder.Build, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A child that compiled anything (the driver, the prelude, a chapter build) would write
    # into its cache directory: point it at an empty one.
    monkeypatch.setenv("EMBER_BOOK_CACHE", str(tmp_path))
    result = book.run_isolated(
        "import sys\n"
        f"print({str(chapter01.library)!r} in open('/proc/self/maps').read())\n"
        "storage = torch.UntypedStorage(24, device='privateuseone:1')\n"
        "print(storage.device, torch.privateuseone.memory_allocated(1))\n"
        "print(sys.modules['book.builds.builder'].loaded())\n"
    )
    assert result.ok, result.stderr
    assert result.stdout.splitlines() == ["True", "privateuseone:1 24", "None"]
    assert list(tmp_path.iterdir()) == []


def test_timeout_stops_the_child(chapter01: builder.Build) -> None:
    result = book.run_isolated("import time\nprint('started')\ntime.sleep(60)", timeout=5)
    assert result.returncode is None
    assert result.ended == "stopped: it did not finish in time"


# -- the device module -----------------------------------------------------------------------


def test_the_chapters_register_the_packages_device_module(chapter01: builder.Build) -> None:
    # Replaying chapter 01's carry-forward cell again is harmless, and the module is the
    # finished package's file, not a copy.
    Chapter.of("minimal_ops").replay_earlier({})
    assert torch.privateuseone is book.device_module()
    assert torch.privateuseone.__file__ == str(book.extension_path("torch_ember/device_module/__init__.py"))


def _shown_version(place: tuple[str, str]) -> dict[str, object]:
    """Run a Python region the book shows in the namespace of the module that holds its
    latest version: what the reader saw, against the loaded backend."""
    region = sync.python_regions()[place]
    namespace = dict(vars(book.device_module().memory))
    flags = __future__.annotations.compiler_flag  # as the files: annotations stay unevaluated
    exec(compile(region.text, str(region.path), "exec", flags=flags, dont_inherit=True), namespace)
    return namespace


def test_chapter_01s_memory_functions_as_shown_follow_the_driver(chapter01: builder.Build) -> None:
    # Chapter 01 shows the first version (chapters/history/allocator.py, memory.v1); the package
    # holds chapter 11's, which answers from the driver too while the allocator is chapter 01's.
    shown = _shown_version(("history/allocator", "memory.v1"))
    assert shown["memory_allocated"] is not torch.privateuseone.memory_allocated
    storage = torch.UntypedStorage(64, device="privateuseone:0")
    in_use = ember_driver.stats(0).bytes_in_use
    assert shown["memory_allocated"](0) == torch.privateuseone.memory_allocated(0) == in_use
    assert shown["memory_reserved"](0) == torch.privateuseone.memory_reserved(0) == in_use
    assert shown["max_memory_allocated"]() >= in_use
    del storage
    assert shown["memory_allocated"]() == 0
    assert torch.privateuseone.get_allocator_backend() == "driver"


def test_chapter_01s_bad_fork_answer_as_shown(chapter01: builder.Build) -> None:
    shown = _shown_version(("history/allocator", "bad_fork.v1"))
    assert shown["_is_in_bad_fork"]() is False
    assert torch.privateuseone._is_in_bad_fork() is False  # no fork guard in chapter 01's backend


def test_memory_allocated_follows_the_driver(chapter01: builder.Build) -> None:
    before = ember_driver.stats(0).bytes_in_use
    assert torch.privateuseone.memory_allocated() == before
    storage = torch.UntypedStorage(48, device="privateuseone:0")
    assert torch.privateuseone.memory_allocated() == ember_driver.stats(0).bytes_in_use == before + 48
    assert torch.privateuseone.memory_allocated("privateuseone:0") == before + 48
    assert torch.privateuseone.max_memory_allocated(0) >= before + 48
    del storage
    assert torch.privateuseone.memory_allocated() == before == 0


def test_devices_and_the_device_context_manager(chapter01: builder.Build) -> None:
    assert torch.privateuseone.is_available()
    assert torch.privateuseone.device_count() == 2
    assert torch.privateuseone.current_device() == 0
    with torch.privateuseone.device(1):
        assert torch.privateuseone.current_device() == 1
        storage = torch.UntypedStorage(8, device="privateuseone")
        assert storage.device == torch.device("privateuseone:1")
        del storage
    assert torch.privateuseone.current_device() == 0
    torch.privateuseone.set_device("privateuseone:1")
    assert torch.privateuseone.current_device() == 1
    torch.privateuseone.set_device(0)
    assert torch.privateuseone.current_device() == 0


def test_a_bad_index_fails_like_the_device_guard(chapter01: builder.Build) -> None:
    message = "ember driver error: invalid device ordinal: device index 7 is out of range: there are 2 ember devices (0..1)"
    with pytest.raises(RuntimeError, match=message.replace("(", r"\(").replace(")", r"\)")):
        torch.privateuseone.set_device(7)
    with pytest.raises(RuntimeError, match=r"device index 7 is out of range"):
        torch.UntypedStorage(8, device="privateuseone:7")
    with pytest.raises(ValueError, match="expected an privateuseone device, got 'cpu'"):
        torch.privateuseone.memory_allocated("cpu")


def test_manual_seed_does_not_warn_about_the_device(chapter01: builder.Build) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(0)
