"""Compact errors: a long exception shown short, the whole of it one click away.

PyTorch's dispatcher reports a missing kernel with a wall of text: one long
line of boilerplate and the list of every key that has a kernel, then one
``Key: registered at FILE:LINE [kind]`` row per dispatch key, 50 to 100 lines
in all. The row the reader needs is buried, and a traceback through
``torch/_tensor_str.py`` adds five frames of PyTorch's Python on top.

:func:`install` puts a handler into IPython (``shell.set_custom_exc``) that
shows such an error as::

    Cell In[3], line 1
    ----> 1 torch.nn.GELU()(x)

        [... 2 frames left out, in <torch>/nn/modules/module.py]

    File <torch>/nn/modules/activation.py:816, in GELU.forward(self, input)
    --> 816     return F.gelu(input, approximate=self.approximate)

    NotImplementedError: Could not run 'aten::gelu' with arguments from the 'SparseCPU'
        backend. [...]
    'aten::gelu' is only available for these backends: [CPU, CUDA, HIP, MPS, IPU, XPU, HPU,
        VE, ... (92 keys)].

    CPU: registered at <pytorch>/build/aten/src/ATen/RegisterCPU_3.cpp:4482 [kernel]
    AutogradCPU: registered at
        <pytorch>/torch/csrc/autograd/generated/VariableType_1.cpp:9109 [autograd kernel]
    [91 of 95 lines left out; the full message is below]

that is: the cell's frame and the frame that raised (the ones between are
named in one line), the message's first sentence, the list of keys cut to its
first few, the rows of the dispatch table that matter for the key the error
names (:func:`related_keys`), and how many lines were left out. An HTML
``<details>`` element follows, collapsed, with the full message (and every
frame, when frames were left out). A message of another kind longer than
MAX_MESSAGE_LINES keeps its first lines. Short errors are shown as IPython
shows them, but for the width of their lines (and of the messages of the
exceptions chained before them).

A chained error (an exception raised while handling another, "During handling
of the above exception ..." or "The above exception was the direct cause ...",
as ``torch.compile`` raises ``Unsupported`` from the error of an operator it
traced) is compacted when IPython's display of it is longer than
MAX_TRACEBACK_LINES or one of its messages is long. Every exception of the
chain stays, in the order they were raised, joined by IPython's lines: its
header and its message (compacted or fitted as above). Of the frames only the
cell's is shown. The earlier exceptions' frames are the library's (in the
book, PyTorch's), and the last exception's other frames are the code that
handled the one before it (a ``raise ... from`` in a wrapper): what failed is
in the messages. The frames left out of each exception are named in one line,
and the whole chain, as Python prints it, follows collapsed.

The message fits the page's 88-column text column (WIDTH, :func:`fit_message`):
a longer line is wrapped at spaces, its continuations indented four spaces
more than it (the first line counts the ``NotImplementedError: `` in front of
it); ``... (92 keys)`` and ``[autograd kernel]`` are not split, a URL longer
than the column is not broken. A ``registered at`` row shows PyTorch's CI
checkout ``/__w/pytorch/pytorch/`` (the same in every wheel: not a path of the
reader's machine, but noise) as ``<pytorch>/``, keeps the file and line, and
puts them on an indented line of their own when the row is still too wide
(:func:`fit_row`). The frames are left as IPython shows them: their source
lines are the cell's code (at most 88 columns; the ``----> 1`` arrow in front
may push one past the column, and cutting or wrapping it would misquote the
code) or PyTorch's own, and a frame header names a file and function that are
best read whole. The error output's ``evalue`` is the message as shown when
it was compacted, else the real message; the collapsed full message is the
real one, unwrapped, with ``/__w/pytorch/pytorch/`` as PyTorch prints it.
An exception that renders itself (``_render_traceback_``, the book's
CppBuildError) has its plain lines wrapped the same way.

The cell still fails with the real exception: nbval and ``raises-exception``
cells see an ``error`` output with the real ``ename``, and ``%tb`` prints the
whole original traceback. Every path of the machine that ran the cell is
rewritten (:func:`short_paths`): ``/.../site-packages/torch/_tensor.py``
becomes ``<torch>/_tensor.py``, so saved outputs hold for every reader. The
decorations are ASCII: the book renders error outputs with Pygments'
``ipythontb`` lexer, which fails (and `make book` with it) on a ``…``.
"""

from __future__ import annotations

import html
import re
import sys
import textwrap
import traceback
import types
import warnings
from dataclasses import dataclass
from typing import Any

from book.paths import REPO, cache_dir

# A message longer than this is shown compacted.
MAX_MESSAGE_LINES = 20
MAX_MESSAGE_CHARS = 3000
# What a compacted message that is not a dispatcher error keeps.
HEAD_LINES = 8
HEAD_CHARS = 600
# The first keys of "only available for these backends: [...]" that stay.
SHOWN_KEYS = 8
# A traceback longer than this (in lines) keeps only its first and last frame; a chained one, only
# the cell's frame.
MAX_TRACEBACK_LINES = 40
# Source lines IPython shows around the line of a frame: of the cell (IPython's default for the
# exception it was given), and of the exceptions chained before it.
CELL_CONTEXT = 5
CHAIN_CONTEXT = 3
# The page's text column: a message line wider than this is wrapped (see fit_message).
WIDTH = 88
# What a wrapped line's continuation lines are indented by, more than the line itself.
HANGING_INDENT = "    "
# PyTorch's CI checkout, in every "registered at" row of the wheel's dispatch table.
PYTORCH_CHECKOUT = "/__w/pytorch/pytorch/"

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ANSI_SPLIT = re.compile(r"(\x1b\[[0-9;]*m)")
# A path starts a token: at the start of the text or after a space, quote, bracket or "=".
# Absolute or relative (IPython shows files under the working directory relative to it).
_TOKEN = r"(?<![^\s'\"(\[<=,])"
_PREFIX = r"[^\s'\"():,;<>\[\]]*?"
_SITE_PACKAGES = re.compile(rf"{_TOKEN}{_PREFIX}(?:site|dist)-packages/(?:([A-Za-z_][\w-]*)/)?")
_STDLIB = re.compile(rf"{_TOKEN}{_PREFIX}/lib/python3\.\d+/")
_IPYKERNEL_CELL = re.compile(rf"{_TOKEN}{_PREFIX}/ipykernel_\d+/\d+\.py")
_MACHINE = re.compile(rf"{_TOKEN}/(?:work|tmp|root|home|opt)/(?:[^\s'\"():,;<>\[\]/]+/)*")

_COULD_NOT_RUN = re.compile(
    r"^Could not run '(?P<op>[^']+)' with arguments from the '(?P<key>\w+)' backend\."
)
_AVAILABLE = re.compile(r"^(?P<op>'[^']+') is only available for these backends: \[(?P<keys>[^\]]*)\]\.?$")
_ROW = re.compile(r"^(?P<key>\w+)(?: \(inactive\))?: (?:fallthrough )?registered at ")
_ROW_PARTS = re.compile(r"^(?P<head>.*? registered at) (?P<location>\S+)(?: (?P<kind>\[[^\]]*\]))?$")
# Groups of words a wrapped line keeps together: "... (92 keys)", "[autograd kernel]".
_UNBROKEN = re.compile(r"\.\.\. \(\d+ keys\)|\[[\w ]+\]")
# Per-backend functionality prefixes of runtime keys: SparseCPU = Sparse x CPU.
_FUNCTIONALITY_PREFIXES = ("SparseCsr", "Sparse", "Quantized", "NestedTensor", "Autograd", "Autocast")


def short_paths(text: str) -> str:
    """`text` with every path of this machine rewritten to one that holds for every reader.

    ``/.../site-packages/torch/x.py`` -> ``<torch>/x.py``; the standard library -> ``<python>/``;
    the book's build cache -> ``<ember-cache>/``; this repository -> a path relative to it;
    an IPython cell file -> ``<cell>``; anything else under /work, /tmp, /root, /home, /opt ->
    ``.../NAME``. PyTorch's own ``/__w/pytorch/pytorch/`` (its CI checkout, the same in every
    copy of the wheel) is left alone.
    """
    # Colors first: "\x1b[32m/work/..." must read as a path that starts after the color.
    parts = _ANSI_SPLIT.split(text)
    parts[::2] = [_short_paths(part) for part in parts[::2]]
    return "".join(parts)


def _short_paths(text: str) -> str:
    text = text.replace(f"{cache_dir(create=False)}/", "<ember-cache>/")
    text = _SITE_PACKAGES.sub(lambda m: f"<{m[1]}>/" if m[1] else "<site-packages>/", text)
    text = _STDLIB.sub("<python>/", text)
    text = text.replace(f"{REPO}/", "")
    text = _IPYKERNEL_CELL.sub("<cell>", text)
    return _MACHINE.sub(".../", text)


def fit_row(row: str) -> list[str]:
    """A dispatch-table row as it is shown: ``Key: registered at <pytorch>/FILE:LINE [kind]``.

    PyTorch's CI checkout ``/__w/pytorch/pytorch/`` becomes ``<pytorch>/`` (the file and line stay).
    A row still wider than WIDTH puts its location and kind on an indented line of their own, and
    the kind on one more if that is too wide as well.
    """
    row = row.replace(PYTORCH_CHECKOUT, "<pytorch>/")
    parts = _ROW_PARTS.match(row)
    if len(row) <= WIDTH or parts is None:
        return fit_line(row)
    rest = " ".join(part for part in (parts["location"], parts["kind"]) if part)
    if len(HANGING_INDENT + rest) <= WIDTH or parts["kind"] is None:
        return [parts["head"], HANGING_INDENT + rest]
    return [parts["head"], HANGING_INDENT + parts["location"], HANGING_INDENT + parts["kind"]]


def fit_line(line: str, taken: int = 0) -> list[str]:
    """`line` wrapped at spaces to WIDTH columns, its continuations indented by HANGING_INDENT.

    `taken`: columns that precede the line on the screen (the ``NotImplementedError: `` in front of
    a message's first line). A word longer than the column (a URL) is not broken.
    """
    if taken + len(line) <= WIDTH or not line.strip():
        return [line]
    lead = line[: len(line) - len(line.lstrip(" "))]
    kept = _UNBROKEN.sub(lambda m: m[0].replace(" ", "\0"), line)
    wrapped = textwrap.wrap(
        kept,
        width=WIDTH,
        initial_indent="\0" * taken,
        subsequent_indent=lead + HANGING_INDENT,
        break_long_words=False,
        break_on_hyphens=False,
    )
    wrapped[0] = wrapped[0][taken:]
    return [part.replace("\0", " ") for part in wrapped]


def fit_message(message: str, taken: int = 0) -> str:
    """`message` with every line wider than WIDTH wrapped (rows of a dispatch table by fit_row).

    `taken`: columns in front of the first line (see fit_line).
    """
    lines: list[str] = []
    for i, line in enumerate(message.split("\n")):
        lines += fit_row(line) if _ROW.match(line) else fit_line(line, taken if i == 0 else 0)
    return "\n".join(lines)


def _prefix(ename: str) -> int:
    """The columns of ``ename: `` in front of a message's first line."""
    return len(ename) + 2 if ename else 0


@dataclass(frozen=True)
class Compact:
    """A long message, and what of it an error output shows."""

    shown: str  # the compacted message
    full: str  # the whole message (paths shortened)
    left_out: int  # lines of the full message that `shown` does not have

    @property
    def total(self) -> int:
        return len(self.full.splitlines())


def backend_component(key: str) -> str:
    """The backend of a per-backend runtime key: SparseCPU -> CPU, AutogradPrivateUse1 -> PrivateUse1."""
    for prefix in _FUNCTIONALITY_PREFIXES:
        rest = key.removeprefix(prefix)
        if rest != key and rest[:1].isupper():
            return rest
    return key


def related_keys(key: str) -> list[str]:
    """The dispatch-table rows an expert reads when `key` has no kernel.

    The key itself (it has no row when the error is raised, but a fallthrough
    or inactive entry would show), its dense backend (SparseCPU -> CPU: does
    the plain backend have a kernel?), CPU as the reference implementation
    (a real ``[kernel]`` means every backend needs its own; a composite one
    would have covered ours), and the backend's Autograd key (the kernel that
    ran just before and redispatched down to the missing one).
    """
    backend = backend_component(key)
    keys = [key, backend, "CPU", f"Autograd{backend}"]
    return list(dict.fromkeys(keys))


def _sentences(line: str) -> list[str]:
    return re.split(r"(?<=\.)\s+(?=[A-Z'])", line)


def _head(lines: list[str]) -> tuple[list[str], int]:
    """The first lines of a message (at most HEAD_LINES, about HEAD_CHARS characters), and how many."""
    kept: list[str] = []
    size = 0
    for line in lines[:HEAD_LINES]:
        if size + len(line) > HEAD_CHARS:
            if not kept:  # one very long line: cut it after a sentence
                cut = ""
                for sentence in _sentences(line):
                    if cut and len(cut) + len(sentence) >= HEAD_CHARS:
                        break
                    cut = f"{cut} {sentence}".strip()
                kept.append(cut[:HEAD_CHARS] + " [...]")
            break
        kept.append(line)
        size += len(line)
    return kept, len(kept)


def _dispatcher(lines: list[str]) -> tuple[list[str], int] | None:
    """The lines a dispatcher "Could not run" message keeps and how many of its lines they show.

    None if the message is not one.
    """
    match = _COULD_NOT_RUN.match(lines[0])
    if match is None:
        return None
    sentences = _sentences(lines[0])
    # The sentences after the first are boilerplate ("This could be because …", "If you are a
    # Facebook employee …") and the list of keys that do have an entry, cut to its first few.
    shown = [sentences[0] + (" [...]" if len(sentences) > 2 else "")]
    for sentence in sentences[1:]:
        if available := _AVAILABLE.match(sentence):
            keys = [k.strip() for k in available["keys"].split(",") if k.strip()]
            listed = ", ".join(keys[:SHOWN_KEYS])
            if len(keys) > SHOWN_KEYS:
                listed += f", ... ({len(keys)} keys)"
            shown.append(f"{available['op']} is only available for these backends: [{listed}].")
    wanted = set(related_keys(match["key"]))
    rows = [line for line in lines[1:] if (row := _ROW.match(line)) and row["key"] in wanted]
    if rows:
        shown += [""] + rows
    # The first line, and the blank line and rows when there are rows.
    return shown, 1 + (1 + len(rows) if rows else 0)


def compact_message(message: str, ename: str = "") -> Compact | None:
    """`message` compacted, or None when it is short enough to show whole.

    The shown lines fit WIDTH columns (fit_message), the first after ``ename: ``.
    """
    full = short_paths(message).rstrip("\n")
    lines = full.splitlines()
    if not lines or (len(lines) <= MAX_MESSAGE_LINES and len(full) <= MAX_MESSAGE_CHARS):
        return None
    shown, represented = _dispatcher(lines) or _head(lines)
    left_out = len(lines) - represented
    shown.append(f"[{left_out} of {len(lines)} lines left out; the full message is below]")
    return Compact(fit_message("\n".join(shown), _prefix(ename)), full, left_out)


# --- IPython -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Rendered:
    """What the error output of a cell shows, and the collapsed display after it (if any)."""

    stb: list[str]  # IPython's structured traceback: the error output's `traceback`
    evalue: str  # the error output's `evalue`
    details: dict[str, str] | None  # a mime bundle shown after the error, or None


def _hidden(tb: types.TracebackType) -> bool:
    """A frame IPython leaves out of tracebacks: its own, or one marked __tracebackhide__."""
    frame = tb.tb_frame
    module = frame.f_globals.get("__name__") or ""
    return module.split(".")[0] == "IPython" or bool(frame.f_locals.get("__tracebackhide__"))


def _frames(tb: types.TracebackType | None) -> list[types.TracebackType]:
    frames = []
    while tb is not None:
        if not _hidden(tb) or tb.tb_next is None:
            frames.append(tb)
        tb = tb.tb_next
    return frames


def _chain(frames: list[types.TracebackType]) -> types.TracebackType | None:
    """A new traceback through just these frames."""
    chain = None
    for tb in reversed(frames):
        chain = types.TracebackType(chain, tb.tb_frame, tb.tb_lasti, tb.tb_lineno)
    return chain


def _chained(value: BaseException) -> bool:
    return value.__cause__ is not None or (value.__context__ is not None and not value.__suppress_context__)


def _frame_name(shell: Any, filename: str) -> str:
    """``<cell>`` for a notebook cell (its number differs between runs), else the shortened path."""
    compiler = getattr(shell, "compile", None)
    named = compiler.format_code_name(filename) if hasattr(compiler, "format_code_name") else None
    return "<cell>" if named else short_paths(filename)


def _left_out_line(shell: Any, frames: list[types.TracebackType]) -> str:
    files = dict.fromkeys(_frame_name(shell, tb.tb_frame.f_code.co_filename) for tb in frames)
    s = "" if len(frames) == 1 else "s"
    return "\n".join(fit_line(f"    [... {len(frames)} frame{s} left out, in {', '.join(files)}]")) + "\n"


def _plain_traceback(shell: Any, frames: list[types.TracebackType]) -> str:
    summary = traceback.extract_tb(_chain(frames))
    for frame in summary:
        frame.filename = _frame_name(shell, frame.filename)
    return "".join(traceback.format_list(summary)).rstrip("\n")


def _plain_chain(shell: Any, value: BaseException, frames: list[types.TracebackType]) -> str:
    """The whole of a chained exception as Python prints it: every exception, frame and message."""
    whole = traceback.TracebackException(type(value), value, _chain(frames))
    link: traceback.TracebackException | None = whole
    while link is not None:
        for frame in link.stack:
            frame.filename = _frame_name(shell, frame.filename)
        link = link.__cause__ or (None if link.__suppress_context__ else link.__context__)
    return "".join(whole.format()).rstrip("\n")


def _details(summary: str, body: str) -> str:
    """A collapsed block: closed until the reader opens it, in JupyterLab and in the static book."""
    return (
        f'<details class="ember-error-details"><summary style="cursor: pointer">{html.escape(summary)}</summary>'
        f'<pre style="max-height: 30em; overflow: auto">{html.escape(body)}</pre></details>'
    )


def details_bundle(
    ename: str, compact: Compact | None, all_frames: str | None, exceptions: int = 1
) -> dict[str, str]:
    """The collapsed display that follows a compacted error: its full message, its every frame.

    `exceptions`: how many exceptions `all_frames` holds (a chain, each with its frames and message).
    """
    parts, plain = [], []
    if compact is not None:
        parts.append(_details(f"{ename}: the full message ({compact.total} lines)", compact.full))
        plain.append(f"the full message has {compact.total} lines")
    if all_frames is not None:
        count = len(re.findall(r'^  File "', all_frames, flags=re.MULTILINE))  # not a message's "   File"
        what = f"{count} frames" + (f", {exceptions} exceptions" if exceptions > 1 else "")
        parts.append(_details(f"the whole traceback ({what})", all_frames))
        plain.append(f"the whole traceback {what}")
    return {
        "text/plain": f"[{ename}: {', '.join(plain)}; the HTML view shows them collapsed]",
        "text/html": "\n".join(parts),
    }


def _replace_message(shell: Any, stb: list[str], etype: type, value: BaseException, shown: str) -> list[str]:
    """`stb` with the exception's message replaced by `shown`."""
    first = (str(value).splitlines() or [""])[0]
    formatter = shell.InteractiveTB
    if hasattr(formatter, "format_exception"):
        line = formatter.format_exception(etype.__name__, shown)[0]
    else:
        line = f"{etype.__name__}: {shown}"
    for i in range(len(stb) - 1, -1, -1):
        if first and first in _ANSI.sub("", stb[i]):
            return stb[:i] + [line] + stb[i + 1 :]
    return stb + [line]


def _chain_of(value: BaseException) -> list[BaseException]:
    """The exception and the ones IPython shows before it (its cause or context), last shown first."""
    chain = [value]
    while _chained(chain[-1]) and len(chain) < 10:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        if nxt is None or nxt in chain:
            break
        chain.append(nxt)
    return chain


def _fit_messages(shell: Any, stb: list[str], value: BaseException) -> list[str]:
    """`stb` with the message of the exception, and of each one chained before it, fitted to WIDTH."""
    end = len(stb)
    for exc in _chain_of(value):
        message = short_paths(str(exc))
        fitted = fit_message(message, _prefix(type(exc).__name__))
        first = (str(exc).splitlines() or [""])[0]
        if not first:
            continue
        found = [i for i in range(end) if first in _ANSI.sub("", stb[i])]
        if not found:
            continue
        end = found[-1]
        if fitted != message:
            stb = (
                stb[:end]
                + _replace_message(shell, stb[end : end + 1], type(exc), exc, fitted)
                + stb[end + 1 :]
            )
    return stb


def _one_of_chain(
    shell: Any, exc: BaseException, frames: list[types.TracebackType], shown: int, context: int
) -> list[str]:
    """How IPython shows one exception of a chain (its header, frames and message), with only
    its first `shown` frames, the others named in one line, and its message compacted or fitted."""
    formatter = shell.InteractiveTB
    ename = type(exc).__name__
    # [header, one entry per frame, message, notes...] (ultratb's format_exception_as_a_whole)
    (part,) = formatter.format_exception_as_a_whole(type(exc), exc, _chain(frames[:shown]), context, 0)
    at = 1 + len(frames[:shown])
    compact = compact_message(str(exc), ename)
    message = compact.shown if compact is not None else fit_message(short_paths(str(exc)), _prefix(ename))
    part[at : at + 1] = formatter.format_exception(ename, message)[:1]
    if frames[shown:]:
        part.insert(at, _left_out_line(shell, frames[shown:]))
    return part


def _compact_chain(
    shell: Any, value: BaseException, frames: list[types.TracebackType], top: str, compact: Compact | None
) -> Rendered | None:
    """A long chained exception shown short (see the module doc), or None when the formatter
    cannot show one exception of a chain alone (an IPython without ultratb's methods)."""
    formatter = shell.InteractiveTB
    if not all(
        hasattr(formatter, name)
        for name in ("format_exception_as_a_whole", "prepare_chained_exception_message", "format_exception")
    ):
        return None
    chain = _chain_of(value)[::-1]  # the first exception raised first, as IPython shows them
    stb = [top]
    for i, exc in enumerate(chain):
        if i:  # "The above exception was the direct cause ..." or "During handling ..."
            (between,) = formatter.prepare_chained_exception_message(exc.__cause__)
            stb += between
        if exc is value:  # the cell's frame, where the reader's code made the call
            stb += _one_of_chain(shell, exc, frames, 1, CELL_CONTEXT)
        else:  # its header and message: its frames are named, the whole chain follows collapsed
            stb += _one_of_chain(shell, exc, _frames(exc.__traceback__), 0, CHAIN_CONTEXT)
    evalue = compact.shown if compact is not None else short_paths(str(value))
    details = details_bundle(
        type(value).__name__, compact, short_paths(_plain_chain(shell, value, frames)), len(chain)
    )
    return Rendered([short_paths(line) for line in stb], evalue, details)


def render(
    shell: Any, etype: type[BaseException], value: BaseException, tb: types.TracebackType | None
) -> Rendered:
    """The error output IPython's `shell` shows for this exception, compacted (see the module doc)."""
    if hasattr(value, "_render_traceback_"):  # the exception renders itself (CppBuildError)
        stb = [short_paths(line) for line in value._render_traceback_()]
        stb = [line if _ANSI.search(line) else fit_message(line) for line in stb]
        return Rendered(stb, short_paths(str(value)), None)
    formatter = shell.InteractiveTB
    ename = etype.__name__
    compact = compact_message(str(value), ename)
    frames = _frames(tb)
    stb = formatter.structured_traceback(etype, value, _chain(frames), tb_offset=0)
    # With frames shown ("Context", "Verbose"), IPython's list is [top line, header, frame, ..., message].
    verbose = getattr(formatter, "mode", "") in ("Context", "Verbose")
    long = "\n".join(stb).count("\n") + 1 > MAX_TRACEBACK_LINES
    if _chained(value) and verbose:
        chain = _chain_of(value)
        earlier = (exc for exc in chain if exc is not value)
        if (
            long
            or compact is not None
            or any(compact_message(str(exc), type(exc).__name__) for exc in earlier)
        ):
            chained = _compact_chain(shell, value, frames, stb[0], compact)
            if chained is not None:
                return chained
    all_frames = None
    trim = len(frames) > 2 and not _chained(value) and verbose
    if trim and (compact is not None or long):
        all_frames = short_paths(_plain_traceback(shell, frames))
        stb = formatter.structured_traceback(etype, value, _chain([frames[0], frames[-1]]), tb_offset=0)
        stb = stb[:3] + [_left_out_line(shell, frames[1:-1])] + stb[3:]
    if compact is not None:
        stb = _replace_message(shell, stb, etype, value, compact.shown)
    else:
        stb = _fit_messages(shell, stb, value)
    evalue = compact.shown if compact is not None else short_paths(str(value))
    details = details_bundle(etype.__name__, compact, all_frames) if compact or all_frames else None
    return Rendered([short_paths(line) for line in stb], evalue, details)


def _handler(
    shell: Any,
    etype: type[BaseException],
    value: BaseException,
    tb: types.TracebackType | None,
    tb_offset: int | None = None,
) -> None:
    """IPython's custom exception handler (see ``InteractiveShell.set_custom_exc``)."""
    from IPython.core.error import UsageError
    from IPython.display import display

    # Syntax errors and magics' usage errors have their own display in IPython.
    if issubclass(etype, SyntaxError) or etype is UsageError:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return
    sys.last_type, sys.last_value, sys.last_traceback = etype, value, tb  # for %tb and %debug
    try:
        rendered = render(shell, etype, value, tb)
    except Exception:  # noqa: BLE001 (never lose the reader's error to a bug of ours)
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return
    shell._showtraceback(etype, rendered.evalue, rendered.stb)
    if rendered.details is not None:
        display(rendered.details, raw=True)
    if shell.call_pdb:
        shell.debugger(force=True)


def install(shell: Any = None) -> bool:
    """Show this kernel's errors compacted, with paths that hold for every reader.

    Call once per kernel (``book.start_chapter`` does). Returns False outside IPython.
    """
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((Exception,), _handler)
    warnings.showwarning = show_warning
    return True


def format_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int) -> str:
    """A warning as Python prints it, less the machine's path and the quoted source line, wrapped
    to the page: ``<torch>/nn/functional.py:4315: UserWarning: An output with...``."""
    head = f"{short_paths(filename)}:{lineno}: {category.__name__}: "
    lines = str(message).splitlines() or [""]
    shown = fit_line(head + lines[0]) + [part for line in lines[1:] for part in fit_line(line)]
    return "\n".join(shown) + "\n"


def show_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` for the chapters' kernels: `format_warning` on stderr."""
    (file or sys.stderr).write(format_warning(message, category, filename, lineno))
