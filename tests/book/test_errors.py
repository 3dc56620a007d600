"""book.display.errors: long errors are shown compacted, with the full message one click away and no machine paths.

The messages are real: PyTorch's dispatcher raises them in the test (CPU-only torch has no kernel for
``gelu`` on a sparse tensor, nor for ``exp`` on a quantized one).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest
import torch
import torch.nn.functional as F
from IPython.core.interactiveshell import InteractiveShell
from pygments.lexers import get_lexer_by_name
from pygments.token import Error
from saved_outputs import output_problems
from traitlets.config import Config

from book.display import errors
from book.paths import REPO

ANSI = re.compile(r"\x1b\[[0-9;]*m")
MACHINE_PATH = re.compile(r"(/work/|/tmp/|/root/|/home/|/usr/local/lib/python|/opt/)[\w.-]")


def raised(call: Callable[[], Any]) -> BaseException:
    try:
        call()
    except Exception as error:  # noqa: BLE001 (any exception: the caller checks which)
        return error
    raise AssertionError("expected an exception")


def sparse_gelu() -> None:
    F.gelu(torch.eye(3).to_sparse())


def quantized_exp() -> None:
    with warnings.catch_warnings():  # quantized tensor creation is deprecated; still there in 2.13
        warnings.simplefilter("ignore", UserWarning)
        q = torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)
    q.exp()


def rows(message: str) -> dict[str, str]:
    """The dispatch-table rows of a dispatcher message: key -> whole line."""
    return {line.split(":", 1)[0]: line for line in message.splitlines() if ": registered at " in line}


def unwrapped(text: str) -> str:
    """`text` with the continuation lines of errors.fit_message joined back to their line."""
    return re.sub(r"\n {4}(?=\S)|(?<= registered at)\n {4}", " ", text)


def pytorch_short(row: str) -> str:
    """A dispatch-table row as the compact display shows it: PyTorch's CI checkout shortened."""
    return row.replace("/__w/pytorch/pytorch/", "<pytorch>/")


def privateuse1_empty() -> None:
    """An op with no PrivateUse1 kernel, raised in a fresh process (no backend registered for the
    key there; the book's tests load chapter builds into this one) and raised again here."""
    child = subprocess.run(
        [
            sys.executable,
            "-c",
            (
                "import torch\n"
                "try:\n"
                "    torch.ops.aten.empty.memory_format([2], device='privateuseone')\n"
                "except NotImplementedError as error:\n"
                "    print(error, end='')\n"
            ),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"),
        timeout=120,
        check=False,  # a failure is asserted below, with its stderr
    )
    assert child.returncode == 0 and child.stdout, child.stderr[-2000:]
    raise NotImplementedError(child.stdout)


def widths(text: str) -> list[int]:
    return [len(line) for line in text.split("\n")]


# --- the message ---------------------------------------------------------------------------------


def test_dispatcher_wall_keeps_the_first_sentence_and_the_rows_that_matter() -> None:
    message = str(raised(sparse_gelu))
    assert len(message.splitlines()) > 50, "the premise: the dispatcher's message is a wall"
    compact = errors.compact_message(message)
    assert compact is not None
    shown = compact.shown.splitlines()
    assert shown[0] == "Could not run 'aten::gelu' with arguments from the 'SparseCPU' backend. [...]"
    available = unwrapped(compact.shown).splitlines()[1]
    assert available.startswith("'aten::gelu' is only available for these backends: [CPU, CUDA, ")
    assert re.search(r", \.\.\. \(\d+ keys\)\]\.$", available), available
    # SparseCPU has no row (that is the error); CPU has the kernel, AutogradCPU ran first and redispatched.
    table = rows(message)
    assert "SparseCPU" not in table
    shown_rows = [line for line in unwrapped(compact.shown).splitlines() if ": registered at " in line]
    assert shown_rows == [pytorch_short(table["CPU"]), pytorch_short(table["AutogradCPU"])]
    assert "Facebook" not in compact.shown and "CUDA: registered" not in compact.shown
    total = len(message.rstrip("\n").splitlines())
    assert compact.total == total
    assert compact.left_out == total - 4  # the first line, the blank line, two rows
    assert shown[-1] == f"[{total - 4} of {total} lines left out; the full message is below]"
    assert len(shown) <= 10


def test_the_full_message_is_the_message_with_short_paths() -> None:
    message = str(raised(sparse_gelu))
    compact = errors.compact_message(message)
    assert compact is not None
    assert compact.full == errors.short_paths(message).rstrip("\n")
    assert not MACHINE_PATH.search(compact.full) and not MACHINE_PATH.search(compact.shown)
    # The Meta kernel is registered from torch's Python files: its row names the installed package.
    assert rows(compact.full)["Meta"].startswith("Meta: registered at <torch>/_meta_registrations.py:")


def test_a_quantized_backend_shows_its_dense_backend_and_autograd_rows() -> None:
    message = str(raised(quantized_exp))
    compact = errors.compact_message(message)
    assert compact is not None
    assert compact.shown.startswith(
        "Could not run 'aten::exp.out' with arguments from the 'QuantizedCPU' backend."
    )
    table = rows(message)
    shown_rows = [line for line in unwrapped(compact.shown).splitlines() if ": registered at " in line]
    assert shown_rows == [pytorch_short(table[k]) for k in table if k in ("CPU", "AutogradCPU")]
    assert shown_rows, "aten::exp.out has a CPU kernel"


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("PrivateUse1", ["PrivateUse1", "CPU", "AutogradPrivateUse1"]),
        ("SparsePrivateUse1", ["SparsePrivateUse1", "PrivateUse1", "CPU", "AutogradPrivateUse1"]),
        ("SparseCsrCPU", ["SparseCsrCPU", "CPU", "AutogradCPU"]),
        ("AutogradPrivateUse1", ["AutogradPrivateUse1", "PrivateUse1", "CPU"]),
        ("Meta", ["Meta", "CPU", "AutogradMeta"]),
    ],
)
def test_related_keys(key: str, expected: list[str]) -> None:
    assert errors.related_keys(key) == expected


def test_a_short_message_is_left_whole() -> None:
    message = str(raised(lambda: torch.zeros(2).reshape(3)))
    assert errors.compact_message(message) is None
    assert errors.compact_message("one line") is None


def test_a_long_message_of_another_kind_keeps_its_first_lines() -> None:
    message = "\n".join(f"line {i}" for i in range(30))
    compact = errors.compact_message(message)
    assert compact is not None
    assert compact.shown.splitlines() == [f"line {i}" for i in range(errors.HEAD_LINES)] + [
        f"[{30 - errors.HEAD_LINES} of 30 lines left out; the full message is below]"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "File \x1b[32m/work/venv/lib/python3.11/site-packages/torch/_tensor.py:564\x1b[39m, in f",
            "File \x1b[32m<torch>/_tensor.py:564\x1b[39m, in f",
        ),
        ("File ../.venv/lib/python3.11/site-packages/torch/x.py:3", "File <torch>/x.py:3"),
        ("(/opt/conda/lib/python3.11/site-packages/six.py)", "(<site-packages>/six.py)"),
        ("/usr/local/lib/python3.11/inspect.py:5", "<python>/inspect.py:5"),
        (f"{REPO}/book/builder.py:3", "book/builder.py:3"),
        ("/tmp/ipykernel_123/456.py", "<cell>"),
        # Directories no checkout of the book lives in (a CI clone may sit at /tmp/x, which is the repository).
        ("see /tmp/ember-test-elsewhere/y.txt and /home/ember-test-user/z", "see .../y.txt and .../z"),
        (
            "/__w/pytorch/pytorch/aten/src/ATen/X.cpp:3 [kernel]",
            "/__w/pytorch/pytorch/aten/src/ATen/X.cpp:3 [kernel]",
        ),
        ("https://fburl.com/ptmfixes", "https://fburl.com/ptmfixes"),
    ],
)
def test_short_paths(text: str, expected: str) -> None:
    assert errors.short_paths(text) == expected


def test_short_paths_names_the_build_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv("EMBER_BOOK_CACHE", str(cache))
    assert (
        errors.short_paths(f"{cache}/builds/ember_02/main.cpp:3")
        == "<ember-cache>/builds/ember_02/main.cpp:3"
    )
    assert not cache.exists()  # naming the cache (book.paths.cache_dir) does not make it


# --- the width of the page ---------------------------------------------------------------------


@pytest.mark.parametrize("error", [sparse_gelu, quantized_exp, privateuse1_empty])
def test_a_dispatcher_wall_compacts_to_lines_that_fit_the_page(error: Callable[[], None]) -> None:
    value = raised(error)
    message = str(value)
    assert max(widths(message)) > 110, "the premise: the dispatcher's lines are wider than the page"
    compact = errors.compact_message(message, type(value).__name__)
    assert compact is not None
    shown = f"{type(value).__name__}: {compact.shown}"
    assert max(widths(shown)) <= errors.WIDTH, shown
    # Wrapped, not cut: joined back, the first sentence and the list of keys are whole.
    first, available = unwrapped(compact.shown).splitlines()[:2]
    assert first == errors._sentences(message.splitlines()[0])[0] + " [...]"
    assert re.fullmatch(
        r"'aten::[\w.]+' is only available for these backends: \[.*, \.\.\. \(\d+ keys\)\]\.", available
    )
    assert "... (" in compact.shown and "(\n" not in compact.shown, "'... (N keys)' stays on one line"


def test_the_privateuse1_error_shows_its_autograd_row_shortened() -> None:
    message = str(raised(privateuse1_empty))
    compact = errors.compact_message(message, "NotImplementedError")
    assert compact is not None
    row = rows(message)["AutogradPrivateUse1"]
    assert row.startswith("AutogradPrivateUse1: registered at /__w/pytorch/pytorch/torch/csrc/")
    head, location = row.split(" at ")
    assert f"{head} at\n    {location.replace('/__w/pytorch/pytorch/', '<pytorch>/')}" in compact.shown
    assert "/__w/" not in compact.shown
    # The details keep PyTorch's message as it is: every row, with the checkout PyTorch names.
    assert row in compact.full and compact.full == errors.short_paths(message).rstrip("\n")


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (  # fits once shortened: one line, file and line kept
            "CPU: registered at /__w/pytorch/pytorch/build/aten/src/ATen/RegisterCPU_3.cpp:4482 [kernel]",
            ["CPU: registered at <pytorch>/build/aten/src/ATen/RegisterCPU_3.cpp:4482 [kernel]"],
        ),
        (  # still too wide: the location and kind on an indented line
            (
                "AutogradCPU: registered at "
                "/__w/pytorch/pytorch/torch/csrc/autograd/generated/VariableType_1.cpp:9109 [autograd kernel]"
            ),
            [
                "AutogradCPU: registered at",
                "    <pytorch>/torch/csrc/autograd/generated/VariableType_1.cpp:9109 [autograd kernel]",
            ],
        ),
        (  # and the kind on one more when that is too wide as well
            (
                "AutogradPrivateUse1: registered at "
                "/__w/pytorch/pytorch/build/aten/src/ATen/RegisterCompositeImplicitAutograd_0.cpp:5570 [math kernel]"
            ),
            [
                "AutogradPrivateUse1: registered at",
                "    <pytorch>/build/aten/src/ATen/RegisterCompositeImplicitAutograd_0.cpp:5570",
                "    [math kernel]",
            ],
        ),
        (
            (
                "ADInplaceOrView: fallthrough registered at "
                "/__w/pytorch/pytorch/aten/src/ATen/core/VariableFallbackKernel.cpp:104 [backend fallback]"
            ),
            [
                "ADInplaceOrView: fallthrough registered at",
                "    <pytorch>/aten/src/ATen/core/VariableFallbackKernel.cpp:104 [backend fallback]",
            ],
        ),
    ],
)
def test_fit_row(row: str, expected: list[str]) -> None:
    assert errors.fit_row(row) == expected


def test_fit_line_wraps_with_a_hanging_indent() -> None:
    line = "Expected one of " + ", ".join(f"device{i}" for i in range(20)) + " at the start"
    fitted = errors.fit_line(line, taken=len("RuntimeError: "))
    assert len("RuntimeError: " + fitted[0]) <= errors.WIDTH
    assert all(part.startswith("    ") and len(part) <= errors.WIDTH for part in fitted[1:])
    assert " ".join(part.strip() for part in fitted) == line
    # An indented line keeps its indent, and its continuations go four columns further.
    assert errors.fit_line("  " + line)[1].startswith("      device")
    # A short line, and a word wider than the page (a URL), are left whole.
    assert errors.fit_line("short") == ["short"]
    url = "https://example.org/" + "x" * 100
    assert f"      {url}" in errors.fit_line(f"  Hint: see {url} for how to fix")


# --- the error output, in IPython --------------------------------------------------------------


class Recorder:
    """What the shell shows: the error output (as ipykernel would send it) and displays after it."""

    def __init__(self) -> None:
        self.errors: list[tuple[str, str, list[str]]] = []
        self.displays: list[dict[str, Any]] = []
        self.order: list[str] = []


@pytest.fixture
def shell(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[InteractiveShell, Recorder]]:
    existed = InteractiveShell.initialized()
    config = Config()
    config.HistoryManager.enabled = False  # no history database in the home directory
    ip = InteractiveShell.instance(config=config)
    ip.InteractiveTB.set_mode("Context")  # what the Jupyter kernel uses
    record = Recorder()

    def showtraceback(etype: type, evalue: Any, stb: list[str]) -> None:
        record.errors.append((etype.__name__, str(evalue), stb))
        record.order.append("error")

    def publish(data: dict[str, Any], metadata: Any = None, **kwargs: Any) -> None:
        record.displays.append(data)
        record.order.append("display")

    monkeypatch.setattr(ip, "_showtraceback", showtraceback)
    monkeypatch.setattr(ip.display_pub, "publish", publish)
    ip.user_ns.update(torch=torch, F=F)
    assert errors.install(ip)
    yield ip, record
    ip.set_custom_exc((), None)
    if not existed:
        InteractiveShell.clear_instance()


def test_a_cell_with_a_dispatcher_error_still_fails_with_a_compact_error(
    shell: tuple[InteractiveShell, Recorder],
) -> None:
    ip, record = shell
    result = ip.run_cell("x = torch.eye(3).to_sparse()\ntorch.nn.GELU()(x)")
    assert isinstance(result.error_in_exec, NotImplementedError), "the cell fails with the real exception"
    assert sys.last_value is result.error_in_exec, "%tb and %debug see the real exception"
    assert record.order == ["error", "display"], "the full message follows the error"
    ename, evalue, stb = record.errors[0]
    text = ANSI.sub("", "\n".join(stb))
    assert ename == "NotImplementedError"
    compact = errors.compact_message(str(result.error_in_exec), ename)
    assert compact is not None and evalue == compact.shown
    assert text.endswith(compact.shown)
    # The cell's frame and the frame that raised, with the two nn.Module frames between them named.
    assert "Cell In[" in text and "torch.nn.GELU()(x)" in text
    assert "[... 2 frames left out, in <torch>/nn/modules/module.py]" in text
    assert "File <torch>/nn/modules/activation.py:" in text and "F.gelu(input" in text
    assert len(text.splitlines()) < 30, text
    # The message fits the page; the cell's source lines are short, so here everything does.
    assert max(widths(text)) <= errors.WIDTH, text
    assert not MACHINE_PATH.search(text)
    # The book renders error outputs with the ipythontb lexer; a token it cannot lex fails `make book`.
    assert not [v for t, v in get_lexer_by_name("ipythontb").get_tokens(text) if t is Error]


def test_the_full_message_and_every_frame_are_collapsed_html(
    shell: tuple[InteractiveShell, Recorder],
) -> None:
    ip, record = shell
    result = ip.run_cell("torch.nn.GELU()(torch.eye(3).to_sparse())")
    (bundle,) = record.displays
    page = bundle["text/html"]
    assert page.count('<details class="ember-error-details">') == 2
    assert "<details open" not in page and " open>" not in page
    full = errors.short_paths(str(result.error_in_exec)).rstrip("\n")
    assert "the full message (" in page and f"({len(full.splitlines())} lines)" in page
    assert errors.html.escape(full) in page
    # The full message is PyTorch's, unwrapped: its rows name the checkout and run past the page.
    assert "registered at /__w/pytorch/pytorch/" in page and max(widths(full)) > errors.WIDTH
    assert "the whole traceback (4 frames)" in page and "&lt;torch&gt;/nn/modules/module.py" in page
    assert not MACHINE_PATH.search(page)
    assert len(bundle["text/plain"].splitlines()) == 1


def test_a_short_error_is_shown_whole(shell: tuple[InteractiveShell, Recorder]) -> None:
    ip, record = shell
    result = ip.run_cell("torch.zeros(2).reshape(3)")
    assert isinstance(result.error_in_exec, RuntimeError)
    ((ename, evalue, stb),) = record.errors
    assert (ename, evalue) == ("RuntimeError", str(result.error_in_exec))
    assert ANSI.sub("", stb[-1]) == f"RuntimeError: {result.error_in_exec}"
    assert record.displays == []


def test_a_short_error_with_a_long_line_is_wrapped(shell: tuple[InteractiveShell, Recorder]) -> None:
    ip, record = shell
    result = ip.run_cell("torch.device('bogus')")
    message = str(result.error_in_exec)
    assert len("RuntimeError: " + message) > errors.WIDTH, "the premise: one line wider than the page"
    ((ename, evalue, stb),) = record.errors
    assert (ename, evalue) == ("RuntimeError", message), "the error output keeps the real message"
    text = ANSI.sub("", "\n".join(stb))
    assert max(widths(text)) <= errors.WIDTH, text
    assert unwrapped(text).endswith(f"RuntimeError: {message}")
    assert record.displays == [], "nothing left out, nothing collapsed"
    assert not [v for t, v in get_lexer_by_name("ipythontb").get_tokens(text) if t is Error]


def test_the_messages_of_chained_exceptions_are_wrapped(shell: tuple[InteractiveShell, Recorder]) -> None:
    ip, record = shell
    ip.run_cell(
        "try:\n    raise NotImplementedError('inner ' + 'word ' * 40)\n"
        "except Exception as e:\n    raise RuntimeError('outer ' + 'thing ' * 30) from e"
    )
    ((ename, _evalue, stb),) = record.errors
    text = ANSI.sub("", "\n".join(stb))
    assert ename == "RuntimeError" and "The above exception was the direct cause" in text
    assert max(widths(text)) <= errors.WIDTH, text
    joined = unwrapped(text)
    assert "NotImplementedError: inner" + " word" * 40 in joined
    assert joined.endswith("RuntimeError: outer" + " thing" * 30)
    # A short chain is shown as IPython shows it, frames and all: nothing left out, nothing collapsed.
    assert "left out" not in text and record.displays == []
    assert text.count("Cell In[") == 2


# Three exceptions, each raised while handling the one before, through frames of the cell's own
# functions: IPython shows every frame of every exception with its source, more than fits a page.
LONG_CHAIN = """
def kernel(n):
    if n:
        return kernel(n - 1)
    raise NotImplementedError("custom_abs: no fake impl, " + "so no fake tensor " * 12)


def trace():
    try:
        kernel(3)
    except NotImplementedError:
        raise LookupError("custom_abs.default")


def compile_and_run():
    try:
        trace()
    except LookupError as error:
        steps = [f"  step {i}: what failed" for i in range(12)]
        message = "\\n".join(["Unsupported operator", *steps])
        raise RuntimeError(message) from error


compile_and_run()"""


def visible_lines(text: str) -> list[str]:
    """The lines of `text` that must fit the page: a line of one word (a URL) is left whole."""
    return [line for line in text.split("\n") if " " in line.strip()]


def test_a_long_chained_traceback_shows_every_message_and_the_cells_frame(
    shell: tuple[InteractiveShell, Recorder],
) -> None:
    ip, record = shell
    result = ip.run_cell(LONG_CHAIN)
    error = result.error_in_exec
    assert isinstance(error, RuntimeError), "the cell fails with the real exception"
    assert isinstance(error.__cause__, LookupError)
    assert isinstance(error.__cause__.__context__, NotImplementedError)
    # The premise: IPython alone shows every frame of the chain, a wall of more than 40 lines.
    whole = ip.InteractiveTB.structured_traceback(type(error), error, error.__traceback__)
    assert len(ANSI.sub("", "\n".join(whole)).splitlines()) > errors.MAX_TRACEBACK_LINES
    ((ename, evalue, stb),) = record.errors
    text = ANSI.sub("", "\n".join(stb))
    assert (ename, evalue) == ("RuntimeError", str(error))
    assert len(text.splitlines()) < 40, text
    # Every message, in the order raised, with the lines that join them.
    order = [
        "NotImplementedError: custom_abs: no fake impl,",
        "During handling of the above exception, another exception occurred:",
        "LookupError: custom_abs.default",
        "The above exception was the direct cause of the following exception:",
        "RuntimeError: Unsupported operator",
    ]
    at = [text.index(part) for part in order]
    assert at == sorted(at), text
    assert "so no fake tensor " * 11 in unwrapped(text), "the cause's message is whole"
    assert text.endswith("  step 11: what failed")
    # The frames: the cell's line that made the call; the others are named, not shown.
    assert "Cell In[" in text and re.search(r"\n-+> \d+ compile_and_run\(\)\n", text), text
    assert text.count("Cell In[") == 1 and "return kernel(n - 1)" not in text
    assert text.count("left out, in <cell>]") == 3
    assert "[... 5 frames left out" in text and "[... 1 frame left out" in text
    assert max(widths(text)) <= errors.WIDTH, text
    assert not [v for t, v in get_lexer_by_name("ipythontb").get_tokens(text) if t is Error]
    # The whole chain, as Python prints it, one click away.
    (bundle,) = record.displays
    assert "the whole traceback (9 frames, 3 exceptions)" in bundle["text/html"]
    page = errors.html.unescape(bundle["text/html"])
    assert "raise RuntimeError(" in page and "return kernel(n - 1)" in page
    assert "The above exception was the direct cause of the following exception:" in page
    assert len(bundle["text/plain"].splitlines()) == 1


@pytest.fixture
def op_without_fake_impl() -> Iterator[str]:
    """A custom operator with a CPU kernel and no fake implementation, as chapter 07's first one."""
    library = torch.library.Library("book_errors_test", "DEF")
    library.define("no_fake(Tensor x) -> Tensor")
    library.impl("no_fake", lambda x: x.abs(), "CPU")
    yield "torch.ops.book_errors_test.no_fake"
    library._destroy()


def test_a_compile_error_chained_to_the_missing_fake_impl_fits_well_on_a_page(
    shell: tuple[InteractiveShell, Recorder], op_without_fake_impl: str
) -> None:
    """The real chain chapter 07 shows: torch.compile's Unsupported, raised from FakeTensor's
    UnsupportedOperatorException, raised while handling the operator's NotImplementedError."""
    ip, record = shell
    ip.run_cell(
        f"def scaled(t):\n    return {op_without_fake_impl}(t) * 2\n\n\n"
        'torch.compile(scaled, backend="eager", fullgraph=True)(torch.ones(3))'
    )
    ((ename, _evalue, stb),) = record.errors
    text = ANSI.sub("", "\n".join(stb))
    assert ename == "Unsupported"
    assert len(text.splitlines()) < 50, text
    assert "NotImplementedError: book_errors_test::no_fake: attempted to run this operator" in text
    assert "UnsupportedOperatorException: book_errors_test.no_fake.default" in text
    assert "Unsupported: Operator does not support running with fake tensors" in text
    assert "in scaled" in text and "return torch.ops.book_errors_test.no_fake(t) * 2" in text
    assert "left out, in <torch>/_dynamo/eval_frame.py]" in text
    assert max(widths("\n".join(visible_lines(text)))) <= errors.WIDTH, text
    assert not MACHINE_PATH.search(text)
    assert not [v for t, v in get_lexer_by_name("ipythontb").get_tokens(text) if t is Error]
    (bundle,) = record.displays
    # Its frames: two under FakeTensorMode, none of its own, the cell and Dynamo's wrapper; the
    # "File" line of the message's "from user code:" is not one of them.
    assert "the whole traceback (4 frames, 3 exceptions)" in bundle["text/html"]
    assert not MACHINE_PATH.search(bundle["text/html"])


def test_syntax_errors_keep_ipythons_display(shell: tuple[InteractiveShell, Recorder]) -> None:
    ip, record = shell
    result = ip.run_cell("1 +")
    assert isinstance(result.error_before_exec, SyntaxError)
    assert "SyntaxError" in ANSI.sub("", "\n".join(record.errors[0][2]))


def test_an_exception_that_renders_itself_keeps_its_rendering(
    shell: tuple[InteractiveShell, Recorder],
) -> None:
    ip, record = shell

    class Rendered(RuntimeError):
        def _render_traceback_(self) -> list[str]:
            return [f"Rendered: see {REPO}/extension/csrc/x.cpp and /tmp/y/z.h" + " because" * 10]

    ip.user_ns["Rendered"] = Rendered
    ip.run_cell("raise Rendered('x')")
    ((ename, _evalue, stb),) = record.errors
    assert ename == "Rendered"
    assert stb == [
        "Rendered: see extension/csrc/x.cpp and .../z.h" + " because" * 5 + "\n   " + " because" * 5
    ]


# --- end to end: a notebook run by a Jupyter kernel ---------------------------------------------


def test_a_notebook_keeps_a_compact_error_and_passes_the_output_rules(tmp_path: Path) -> None:
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import torch\nimport book.display.errors\n\nbook.display.errors.install()"
        ),
        nbformat.v4.new_code_cell("x = torch.eye(3).to_sparse()\ntorch.nn.functional.gelu(x)"),
    ]
    notebook.cells[1].metadata["tags"] = ["raises-exception"]
    NotebookClient(notebook, timeout=120, kernel_name="python3", allow_errors=True).execute()
    error, details = notebook.cells[1].outputs
    assert error.output_type == "error" and error.ename == "NotImplementedError"
    assert details.output_type == "display_data" and "<details" in details.data["text/html"]
    path = tmp_path / "x.ipynb"
    nbformat.write(notebook, path)
    assert output_problems(path) == []


def test_a_warning_shows_without_the_machine_path_and_fits_the_page() -> None:
    from book.display.errors import format_warning

    shown = format_warning(
        UserWarning("An output with one or more elements was resized since it had shape [], " * 3),
        UserWarning,
        "/work/x/.venv/lib/python3.11/site-packages/torch/nn/functional.py",
        4315,
    )
    assert shown.startswith("<torch>/nn/functional.py:4315: UserWarning: An output with")
    assert "/work/" not in shown
    assert all(len(line) <= 88 for line in shown.splitlines())
    assert shown.count("resized") == 3
