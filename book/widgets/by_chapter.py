"""The finished backend's dispatch table, grouped by the chapter whose code filled each entry.

Everything is read from the live dispatcher (`book.widgets.table.parse_table`, i.e.
``torch._C._dispatch_dump_table``), never from the notebooks' text. A chapter build compiles
each part after a ``#line 1 "NN_stem.ipynb[part]"`` directive (`book.units.source_text`), so the
``registered at`` location the dispatcher keeps for a ``TORCH_LIBRARY_IMPL`` block names the
notebook and the part whose code made the registration: the chapter is read off it. A part that a
later chapter revised is compiled from the revision, so its entries belong to the revising chapter
(the one whose code fills them in the finished backend).

Three kinds of entries at ember's keys:

* a kernel (or an alias-key kernel, e.g. a custom operator's CompositeExplicitAutograd kernel)
  registered by a chapter: one row per (operator, key);
* a backend fallback or fallthrough registered by a chapter (chapter 03's CPU fallback, chapter
  09's autocast fallthrough): one registration that serves every operator without a kernel of its
  own at that key, counted;
* an entry the book did not register (PyTorch's composite kernels at ``PrivateUse1``, which call
  ember's kernels underneath): counted, attributed to no chapter.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from book.widgets import table as t

# The runtime keys that belong to ember's device type.
EMBER_KEYS: tuple[str, ...] = (
    "PrivateUse1",
    "AutogradPrivateUse1",
    "AutocastPrivateUse1",
    "SparsePrivateUse1",
    "SparseCsrPrivateUse1",
    "QuantizedPrivateUse1",
    "NestedTensorPrivateUse1",
)

# A chapter build's registration location: "09_autocast.ipynb[autocast_fallthrough]:4".
_ORIGIN = re.compile(r"^(?P<chapter>\d\d_\w+)\.ipynb\[(?P<part>[^\]]+)\]:\d+$")

SHARED_KINDS = (t.FALLBACK, t.FALLTHROUGH)  # one registration for every operator
# At the others (sparse, quantized, nested layouts) only kernels registered at the key itself count:
# a kernel registered at an alias key (a custom operator's CompositeExplicitAutograd) is copied there too.
MAIN_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1")


def origin(location: str | None) -> tuple[str, str] | None:
    """(chapter stem, part) of a registration made by a chapter build, else None."""
    match = _ORIGIN.match(location or "")
    return (match["chapter"], match["part"]) if match else None


@dataclass(frozen=True)
class Filled:
    """One entry of ember's dispatch table that a chapter's code registered."""

    op: str
    key: str
    entry: t.Entry
    chapter: str
    part: str


@dataclass(frozen=True)
class Shared:
    """A backend fallback or fallthrough a chapter registered, and how many operators it serves."""

    key: str
    entry: t.Entry
    chapter: str
    part: str
    serves: int


@dataclass
class ChapterGroup:
    chapter: str
    kernels: list[Filled] = field(default_factory=list)
    shared: list[Shared] = field(default_factory=list)

    @property
    def operators(self) -> list[str]:
        return sorted({f.op for f in self.kernels})

    @property
    def parts(self) -> list[str]:
        return sorted({f.part for f in self.kernels} | {s.part for s in self.shared})

    @property
    def keys(self) -> list[str]:
        found = {f.key for f in self.kernels} | {s.key for s in self.shared}
        return [key for key in EMBER_KEYS if key in found]


@dataclass(frozen=True)
class ByChapter:
    """Ember's dispatch table, every operator the dispatcher knows, grouped by chapter."""

    operators: int  # how many operators were read
    keys: tuple[str, ...]
    groups: dict[str, ChapterGroup]  # chapter stem -> group, in book order
    not_ours: dict[str, int]  # key -> entries there PyTorch registered (composite, autograd kernels)
    unattributed: list[tuple[str, str, str]]  # (op, key, location): the book's, but no chapter origin

    def group(self, chapter: str) -> ChapterGroup:
        """The group of a chapter, by stem ("04_stub_kernels") or number prefix ("04")."""
        for stem, group in self.groups.items():
            if stem == chapter or stem[:2] == chapter:
                return group
        raise LookupError(f"no chapter {chapter!r} filled an entry of ember's dispatch table")

    def chapter_of(self, op: str, key: str = "PrivateUse1") -> str | None:
        """The chapter whose code filled `op` at `key` (a kernel, or the fallback that serves it)."""
        for group in self.groups.values():
            if any(f.op == op and f.key == key for f in group.kernels):
                return group.chapter
        entry = t.parse_table(op).get(key)
        found = origin(entry.location) if entry is not None and entry.kind in SHARED_KINDS else None
        return found[0] if found else None


def read(ops: Iterable[str] | None = None, keys: Iterable[str] = EMBER_KEYS) -> ByChapter:
    """Read the live dispatcher: every operator (or `ops`) at ember's keys."""
    names = t.all_operators() if ops is None else t.expand(ops)
    columns = t.check_keys(list(keys))
    kernels: list[Filled] = []
    shared: dict[tuple[str, str, str], list[t.Entry]] = {}  # (key, chapter, part) -> entries served
    not_ours: dict[str, int] = {}
    unattributed: list[tuple[str, str, str]] = []
    for op in names:
        table = t.parse_table(op)
        for key in columns:
            entry = table.get(key)
            if entry is None:
                continue
            if not entry.ours:
                not_ours[key] = not_ours.get(key, 0) + 1
                continue
            if key not in MAIN_KEYS and entry.kind != t.KERNEL:
                continue
            found = origin(entry.location)
            if found is None:
                unattributed.append((op, key, entry.location or ""))
            elif entry.kind in SHARED_KINDS:
                shared.setdefault((key, *found), []).append(entry)
            else:
                kernels.append(Filled(op, key, entry, *found))
    groups: dict[str, ChapterGroup] = {}
    for filled in kernels:
        groups.setdefault(filled.chapter, ChapterGroup(filled.chapter)).kernels.append(filled)
    for (key, chapter, part), entries in shared.items():
        group = groups.setdefault(chapter, ChapterGroup(chapter))
        group.shared.append(Shared(key, entries[0], chapter, part, len(entries)))
    ordered = {stem: groups[stem] for stem in sorted(groups)}
    return ByChapter(len(names), tuple(columns), ordered, not_ours, unattributed)
