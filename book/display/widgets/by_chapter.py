"""The finished backend's dispatch table, grouped by the chapter whose code filled each entry.

Everything is read from the live dispatcher (`book.display.widgets.table.parse_table`, i.e.
``torch._C._dispatch_dump_table``), never from the notebooks' text. A chapter build compiles
each part after a ``#line 1 "02_minimal_ops.ipynb[part]"`` directive (`book.builds.units.source_text`), so the
``registered at`` location the dispatcher keeps for a ``TORCH_LIBRARY_IMPL`` block names the
notebook and the part whose code made the registration: the chapter is read off it. A part that a
later chapter revised is compiled from the revision, so the location names the revising chapter. Its
entries still belong to the chapter that introduced them, the chapter of the part's first version
that names the operator (`introduced_by`, read from the notebooks' versions of the part), and are
marked as revised in the chapter whose version is compiled.

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
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from book.display.widgets import table as t
from book.parts.regions import chapter_slugs, slug_of, versions_through

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

# A chapter build's registration location: "09_autocast.ipynb[autocast_fallthrough]:4" (the notebook
# file's stem; `origin` turns it into the chapter's slug).
_ORIGIN = re.compile(r"^(?P<notebook>\w+)\.ipynb\[(?P<part>[^\]]+)\]:\d+$")

SHARED_KINDS = (t.FALLBACK, t.FALLTHROUGH)  # one registration for every operator
# At the others (sparse, quantized, nested layouts) only kernels registered at the key itself count:
# a kernel registered at an alias key (a custom operator's CompositeExplicitAutograd) is copied there too.
MAIN_KEYS = ("PrivateUse1", "AutogradPrivateUse1", "AutocastPrivateUse1")


def origin(location: str | None) -> tuple[str, str] | None:
    """(chapter slug, part) of a registration made by a chapter build, else None."""
    match = _ORIGIN.match(location or "")
    if match is None:
        return None
    slug = slug_of(match["notebook"]) if _is_chapter_file(match["notebook"]) else None
    return (slug, match["part"]) if slug is not None and slug in chapter_slugs() else None


def _is_chapter_file(stem: str) -> bool:
    try:
        slug_of(stem)
    except ValueError:
        return False
    return True


@cache
def _versions(compiled: str, part: str) -> tuple[tuple[str, str], ...]:
    """(chapter, source) of every version of `part` shown up to chapter `compiled`, in book order."""
    return tuple((version.chapter, version.source) for version in versions_through(compiled, part))


def introduced_by(compiled: str, part: str, op: str | None = None) -> str:
    """The chapter that introduced a registration that chapter `compiled`'s version of `part` makes.

    For `op`: the chapter of the part's first version whose text names the operator (``"add.out"``,
    ``"aten::add.out"``, or a schema ``"custom_abs(Tensor x) -> Tensor"``), since a revision can
    register operators its first version did not; `compiled` if no version names it. Without
    `op` (a backend fallback or fallthrough): the chapter of the part's first version. A part no
    notebook shows (a reader's edited cell) counts for `compiled`.
    """
    versions = _versions(compiled, part)
    if not versions:
        return compiled
    if op is None:
        return versions[0][0]
    named = re.compile(r'"(?:\w+::)?' + re.escape(op.split("::", 1)[-1]) + r'["(]')
    return next((chapter for chapter, source in versions if named.search(source)), compiled)


def attribution(compiled: str, part: str, op: str | None = None) -> tuple[str, str | None]:
    """(the chapter that introduced the registration, the later chapter that revised it or None)."""
    chapter = introduced_by(compiled, part, op)
    return chapter, (compiled if compiled != chapter else None)


@dataclass(frozen=True)
class Filled:
    """One entry of ember's dispatch table that a chapter's code registered."""

    op: str
    key: str
    entry: t.Entry
    chapter: str  # the chapter that introduced the registration
    part: str
    revised_in: str | None = None  # the later chapter whose version of the part is compiled


@dataclass(frozen=True)
class Shared:
    """A backend fallback or fallthrough a chapter registered, and how many operators it serves."""

    key: str
    entry: t.Entry
    chapter: str  # the chapter that introduced the registration
    part: str
    serves: int
    revised_in: str | None = None  # the later chapter whose version of the part is compiled


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
    def revised(self) -> dict[str, int]:
        """How many of its entries each later chapter revised: revising chapter -> entries."""
        found = Counter(f.revised_in for f in self.kernels) + Counter(s.revised_in for s in self.shared)
        return {chapter: found[chapter] for chapter in sorted(filter(None, found))}

    @property
    def keys(self) -> list[str]:
        found = {f.key for f in self.kernels} | {s.key for s in self.shared}
        return [key for key in EMBER_KEYS if key in found]


@dataclass(frozen=True)
class ByChapter:
    """Ember's dispatch table, every operator the dispatcher knows, grouped by chapter."""

    operators: int  # how many operators were read
    keys: tuple[str, ...]
    groups: dict[str, ChapterGroup]  # chapter slug -> group, in book order
    not_ours: dict[str, int]  # key -> entries there PyTorch registered (composite, autograd kernels)
    unattributed: list[tuple[str, str, str]]  # (op, key, location): the book's, but no chapter origin

    def group(self, chapter: str) -> ChapterGroup:
        """The group of a chapter, by its slug ("stub_kernels")."""
        if chapter in self.groups:
            return self.groups[chapter]
        raise LookupError(f"no chapter {chapter!r} filled an entry of ember's dispatch table")

    def filled(self, op: str, key: str = "PrivateUse1") -> Filled | None:
        """The kernel a chapter registered for `op` at `key`, if any."""
        for group in self.groups.values():
            for filled in group.kernels:
                if filled.op == op and filled.key == key:
                    return filled
        return None

    def chapter_of(self, op: str, key: str = "PrivateUse1") -> str | None:
        """The chapter that introduced the entry of `op` at `key` (a kernel, or the fallback that serves it)."""
        filled = self.filled(op, key)
        if filled is not None:
            return filled.chapter
        entry = t.parse_table(op).get(key)
        found = origin(entry.location) if entry is not None and entry.kind in SHARED_KINDS else None
        return introduced_by(*found) if found else None


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
                compiled, part = found
                chapter, revised = attribution(compiled, part, op)
                kernels.append(Filled(op, key, entry, chapter, part, revised))
    groups: dict[str, ChapterGroup] = {}
    for filled in kernels:
        groups.setdefault(filled.chapter, ChapterGroup(filled.chapter)).kernels.append(filled)
    for (key, compiled, part), entries in shared.items():
        chapter, revised = attribution(compiled, part)
        group = groups.setdefault(chapter, ChapterGroup(chapter))
        group.shared.append(Shared(key, entries[0], chapter, part, len(entries), revised))
    ordered = {slug: groups[slug] for slug in chapter_slugs() if slug in groups}
    return ByChapter(len(names), tuple(columns), ordered, not_ours, unattributed)
