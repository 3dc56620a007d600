"""What the live dispatcher holds for an operator at a dispatch key.

Everything here is parsed from ``torch._C._dispatch_dump_table(op)``: the
dispatcher's *computed* table, one line per runtime key that has a kernel,
in one of these forms::

    CPU: registered at FILE:LINE [kernel]
    PrivateUse1: registered at FILE:LINE [backend fallback]
    ADInplaceOrView: fallthrough registered at FILE:LINE [backend fallback]
    AutogradCPU: registered at FILE:LINE [math kernel]            # CompositeImplicitAutograd
    PrivateUse1: registered at FILE:LINE [default backend kernel] # CompositeExplicitAutograd(NonFunctional)
    AutogradCPU: registered at FILE:LINE [autograd kernel]        # the Autograd alias key

A key with no line has nothing: calling the operator with that key on top
raises "Could not run ... with arguments from the ... backend". Which of the
two CompositeExplicitAutograd alias keys a "default backend kernel" came from
is read from ``torch._C._dispatch_dump(op)`` (the registrations themselves).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache

import torch

from book.paths import REPO

# A teaching set: ember's keys, CPU's for comparison, and two keys every call
# meets. In the order a reader compares them, not in priority order.
DEFAULT_KEYS: tuple[str, ...] = (
    "PrivateUse1",
    "AutogradPrivateUse1",
    "CPU",
    "AutogradCPU",
    "ADInplaceOrView",
    "AutocastPrivateUse1",
    "Meta",
)

# Entry.kind
KERNEL = "kernel"  # registered directly at this key
FALLBACK = "fallback"  # the key's backend fallback (m.fallback in TORCH_LIBRARY_IMPL(_, KEY, m))
FALLTHROUGH = "fallthrough"  # a fallthrough: the dispatcher skips the key
ALIAS = "alias"  # derived from a kernel registered at an alias key
NOTHING = "nothing"  # no kernel at all
KINDS = (KERNEL, FALLBACK, FALLTHROUGH, ALIAS, NOTHING)

CIA = "CompositeImplicitAutograd"
CEA = "CompositeExplicitAutograd"
CEA_NF = "CompositeExplicitAutogradNonFunctional"

# The dispatcher's provenance word (in brackets) -> the alias key it means.
_ALIAS_OF_PROVENANCE = {
    "math kernel": CIA,
    "nested kernel": "CompositeImplicitAutogradNestedTensor",
    "autograd kernel": "Autograd",
    "batched kernel": "FuncTorchBatchedDecomposition",
    "ambiguous autogradother": CIA,
}

SHORT_ALIAS = {
    CIA: "CIA",
    CEA: "CEA",
    CEA_NF: "CEA-NF",
    "Autograd": "Autograd",
    "CompositeImplicitAutogradNestedTensor": "CIA-Nested",
    "FuncTorchBatchedDecomposition": "Batched",
}

_TABLE_LINE = re.compile(
    r"^(?P<key>\w+): (?P<fallthrough>fallthrough )?(?P<debug>.*) \[(?P<provenance>[^\]]+)\]$"
)
_REGISTRATION_LINE = re.compile(r"^(?P<key>\w+)(?P<alias>\[alias\])?(?: \(inactive\))?: (?P<debug>.*?) :: ")


@dataclass(frozen=True)
class Entry:
    """One cell of the dispatch table: what runs for `op` at one dispatch key."""

    kind: str  # one of KINDS
    alias: str | None = None  # for ALIAS: the alias key, e.g. "CompositeImplicitAutograd"
    location: str | None = None  # where it was registered, normalized (see normalize_location)
    provenance: str | None = None  # the dispatcher's own word: "kernel", "math kernel", ...

    @property
    def ours(self) -> bool:
        """Registered by the reader's code: a notebook cell or the extension's sources."""
        return self.location is not None and (
            ".ipynb[" in self.location or self.location.startswith(("extension/", NOTEBOOK_CELL))
        )

    @property
    def label(self) -> str:
        """Short cell text: kernel, fallback, fallthrough, CIA, CEA, CEA-NF, Autograd or —."""
        if self.kind == ALIAS:
            return SHORT_ALIAS.get(self.alias or "", self.alias or "alias")
        return "—" if self.kind == NOTHING else self.kind

    @property
    def description(self) -> str:
        """One sentence for a tooltip."""
        where = f" at {self.location}" if self.location else ""
        if self.kind == KERNEL:
            return f"kernel registered{where}"
        if self.kind == FALLBACK:
            return f"backend fallback registered{where}"
        if self.kind == FALLTHROUGH:
            return f"fallthrough (the dispatcher skips this key), registered{where}"
        if self.kind == ALIAS:
            return f"derived from the {self.alias} alias key: kernel registered{where}"
        return "nothing: no kernel, no fallback"


NONE_ENTRY = Entry(NOTHING)

# How normalize_location names a registration made from Python in a notebook cell
# (torch.library.Library.impl in the reader's kernel).
NOTEBOOK_CELL = "<notebook cell>"


def normalize_location(debug: str) -> str:
    """A machine-independent `registered at` location.

    ``/__w/pytorch/pytorch/aten/...`` (PyTorch's CI checkout) becomes a path
    relative to the pytorch repository, an installed file becomes ``torch/...``,
    a file of this repository becomes relative to it. The book's own
    locations, ``02_minimal_ops.ipynb[empty]:12``, stay as they are.
    """
    location = debug.removeprefix("registered at ")
    if ".ipynb[" in location:
        return location
    location = re.sub(r"^/__w/pytorch/pytorch/", "", location)
    location = re.sub(r"^.*/(?:site|dist)-packages/", "", location)
    location = re.sub(r"^.*/ipykernel_\d+/[^:]*", NOTEBOOK_CELL, location)
    location = re.sub(r"^.*?/(extension/csrc/)", r"\1", location)
    location = location.removeprefix(f"{REPO}/")
    if location.startswith("/"):  # somewhere else on this machine
        location = location.rsplit("/", 1)[-1]
    return location


def all_operators() -> list[str]:
    return sorted(torch._C._dispatch_get_all_op_names())


def expand(ops: str | Iterable[str], unknown_ok: bool = False) -> list[str]:
    """Operator names, with glob patterns (``aten::empty*``) expanded and sorted.

    With ``unknown_ok``, a name the dispatcher does not know (yet) is kept and a
    pattern that matches nothing adds nothing: a snapshot taken before a build
    defines ``ember::custom_abs`` records it as empty.
    """
    names = [ops] if isinstance(ops, str) else list(ops)
    known = all_operators()
    known_set = set(known)
    out: list[str] = []
    for name in names:
        if any(c in name for c in "*?["):
            matches = [op for op in known if fnmatch.fnmatchcase(op, name)]
            if not matches and not unknown_ok:
                raise ValueError(f"no operator matches {name!r}")
        elif name in known_set or unknown_ok:
            matches = [name]
        else:
            raise ValueError(
                f"{name!r} is not an operator the dispatcher knows (try a pattern like 'aten::add*')"
            )
        out.extend(m for m in matches if m not in out)
    return out


def _alias_registrations(op: str) -> dict[str, str]:
    """Alias key -> raw debug string of its registration, from the dispatcher's registrations."""
    found: dict[str, str] = {}
    for line in torch._C._dispatch_dump(op).splitlines():
        match = _REGISTRATION_LINE.match(line)
        if match and match["alias"]:
            found[match["key"]] = match["debug"]
    return found


def parse_table(op: str) -> dict[str, Entry]:
    """The computed dispatch table of `op`: runtime key -> Entry, keys with nothing left out."""
    dump = torch._C._dispatch_dump_table(op)
    if not dump:
        raise ValueError(f"{op!r} is not an operator the dispatcher knows")
    aliases: dict[str, str] | None = None
    table: dict[str, Entry] = {}
    for line in dump.splitlines():
        match = _TABLE_LINE.match(line)
        if match is None:
            continue
        provenance, debug = match["provenance"], match["debug"]
        location = normalize_location(debug)
        if match["fallthrough"]:
            entry = Entry(FALLTHROUGH, None, location, provenance)
        elif provenance == "kernel":
            entry = Entry(KERNEL, None, location, provenance)
        elif provenance == "backend fallback":
            entry = Entry(FALLBACK, None, location, provenance)
        elif provenance == "default backend kernel":
            if aliases is None:
                aliases = _alias_registrations(op)
            alias = CEA_NF if aliases.get(CEA_NF) == debug else CEA
            entry = Entry(ALIAS, alias, location, provenance)
        elif provenance in _ALIAS_OF_PROVENANCE:
            entry = Entry(ALIAS, _ALIAS_OF_PROVENANCE[provenance], location, provenance)
        else:  # a provenance this PyTorch added: show it rather than guess
            entry = Entry(KERNEL, None, location, provenance)
        table[match["key"]] = entry
    return table


def entry(op: str, key: str) -> Entry:
    """What the live dispatcher holds for `op` (e.g. "aten::add.Tensor") at `key` (e.g. "CPU")."""
    return parse_table(op).get(key, NONE_ENTRY)


_FUNCTIONALITY_ONLY = {"Dense", "Quantized", "Sparse", "SparseCsr", "NestedTensor", "AutogradFunctionality"}


@cache
def runtime_keys() -> tuple[str, ...]:
    """The runtime dispatch keys, the columns a computed table can have."""
    keys = []
    for name, key in torch._C.DispatchKey.__members__.items():
        if name.startswith(("StartOf", "EndOf")) or name in _FUNCTIONALITY_ONLY:
            continue
        if torch._C._dispatch_is_alias_key(key):
            continue
        keys.append(name)
    return tuple(keys)


def check_keys(keys: str | Iterable[str]) -> list[str]:
    keys = [keys] if isinstance(keys, str) else list(keys)
    for key in keys:
        if key in torch._C.DispatchKey.__members__ and torch._C._dispatch_is_alias_key(
            torch._C.DispatchKey.__members__[key]
        ):
            raise ValueError(
                f"{key} is an alias key: kernels registered there are copied into runtime keys "
                "(e.g. CPU, AutogradCPU), which are the table's columns"
            )
        if key not in runtime_keys():
            raise ValueError(f"{key!r} is not a runtime dispatch key (e.g. {', '.join(DEFAULT_KEYS[:3])})")
    return keys


@dataclass(frozen=True)
class Snapshot:
    """The dispatch tables of some operators at one moment (see `snapshot`)."""

    tables: Mapping[str, Mapping[str, Entry]]

    def entry(self, op: str, key: str) -> Entry:
        return self.tables.get(op, {}).get(key, NONE_ENTRY)

    def __contains__(self, op: object) -> bool:
        return op in self.tables

    def __repr__(self) -> str:
        n = len(self.tables)
        return f"<dispatch table snapshot of {n} operator{'s' if n != 1 else ''}>"


def snapshot(ops: str | Iterable[str]) -> Snapshot:
    """Record what the dispatcher holds now for `ops` (names or glob patterns).

    Pass it later as ``show_table(..., since=snapshot)`` to see only what
    changed in between, e.g. what this chapter's build registered. Operators
    that do not exist yet (a custom op that a later build defines) count as
    empty.
    """
    known = set(all_operators())
    return Snapshot({op: parse_table(op) if op in known else {} for op in expand(ops, unknown_ok=True)})


# A cell of a diff against a snapshot.
SAME = "same"
ADDED = "added"  # nothing before, something now
CHANGED = "changed"  # something else before
REMOVED = "removed"  # something before, nothing now


@dataclass(frozen=True)
class Cell:
    op: str
    key: str
    entry: Entry
    before: Entry | None = None  # with since=: the snapshot's entry
    change: str | None = None  # with since=: SAME, ADDED, CHANGED or REMOVED


def diff(before: Entry, after: Entry) -> str:
    if before == after:
        return SAME
    if before.kind == NOTHING:
        return ADDED
    if after.kind == NOTHING:
        return REMOVED
    return CHANGED


@dataclass(frozen=True)
class TableData:
    """The grid a DispatchTable shows: rows are operators, columns are keys."""

    ops: list[str]
    keys: list[str]
    cells: dict[tuple[str, str], Cell]
    since: bool

    def cell(self, op: str, key: str) -> Cell:
        return self.cells[(op, key)]

    def changed(self) -> list[Cell]:
        """With since=: the cells that differ from the snapshot, row by row."""
        return [c for c in self.cells.values() if c.change not in (None, SAME)]


def table_data(
    ops: str | Iterable[str], keys: Iterable[str] | None = None, since: Snapshot | None = None
) -> TableData:
    """Read the live dispatcher for `ops` x `keys` (and compare with `since`)."""
    names = expand(ops)
    columns = check_keys(DEFAULT_KEYS if keys is None else keys)
    cells: dict[tuple[str, str], Cell] = {}
    for op in names:
        table = parse_table(op)
        for key in columns:
            now = table.get(key, NONE_ENTRY)
            if since is None:
                cells[(op, key)] = Cell(op, key, now)
            else:
                before = since.entry(op, key)
                cells[(op, key)] = Cell(op, key, now, before, diff(before, now))
    return TableData(names, columns, cells, since is not None)
