"""Chapter 17's pictures of eccl: the link's memory, the ring's steps, and what each all-reduce
algorithm costs.

Nothing here is measured: every figure follows from the constants and loops of
`extension/csrc/distributed/` (the chunk size and slot count are read from `EcclLink.h`, so the
pictures change with the code), and is the same on every machine and in every run. Like the other
widgets, each view is plain HTML with inline styles (no script, no SVG), which renders offline in
the built book and survives JupyterLab's sanitizer, plus a text form that nbval compares.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from book.display.widgets.html import MONO, SANS, esc, inline
from book.display.widgets.view import View
from book.paths import CSRC

LINK_HEADER = CSRC / "distributed" / "EcclLink.h"
# One colour per block of the ring (as many as the widest picture has ranks).
BLOCK_COLOURS = ("#dbeafe", "#fde68a", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#e5e7eb", "#a5f3fc")


@dataclass(frozen=True)
class LinkConstants:
    chunk_bytes: int  # kChunkBytes: one staging slot
    slots: int  # kSlots: slots per rank, and per channel
    max_ranks: int  # kMaxRanks


def link_constants() -> LinkConstants:
    """The link's constants, read from EcclLink.h (`constexpr` lines)."""
    text = LINK_HEADER.read_text()

    def value(name: str) -> int:
        found = re.search(rf"constexpr \w+ {name} = ([^;]+);", text)
        if found is None:
            raise LookupError(f"{name} is not a constexpr of {LINK_HEADER.name}")
        return int(eval(found.group(1), {}))  # integer arithmetic such as 1024 * 1024

    return LinkConstants(value("kChunkBytes"), value("kSlots"), value("kMaxRanks"))


def _mib(n: float) -> str:
    return f"{n / 2**20:g} MiB" if n >= 2**20 else f"{n / 2**10:g} KiB"


_CSS = f"""
.ember-eccl {{ font-family: {SANS}; font-size: 12px; margin: 4px 0; max-width: 760px; color: #111827; }}
.ember-eccl .ember-title {{ font-weight: 600; margin-bottom: 4px; }}
.ember-eccl .ember-strip {{ display: flex; margin: 2px 0; }}
.ember-eccl .ember-box {{ border: 1px solid #9ca3af; padding: 3px 4px; margin-right: 2px;
  text-align: center; font-family: {MONO}; font-size: 11px; }}
.ember-eccl .ember-note {{ color: #374151; margin-top: 4px; }}
.ember-eccl table {{ border-collapse: collapse; }}
.ember-eccl td {{ border: 1px solid #d1d5db; padding: 2px 6px; font-family: {MONO}; font-size: 11px; }}
.ember-eccl th {{ border: 1px solid #d1d5db; padding: 2px 6px; background: #f9fafb; text-align: left; }}
"""


class LinkPicture(View):
    """The link of a group of `world` ranks: the header, the ranks' slots, the channels."""

    def __init__(self, world: int = 2) -> None:
        self.world = world
        self.k = link_constants()

    def _regions(self) -> list[tuple[str, str, str]]:
        """(label, detail, colour) of each stretch of the link, in address order."""
        w, k = self.world, self.k
        regions = [("header", f"abort flag, reason; {w} rank controls; {w}x{w} channel controls", "#f3f4f6")]
        for r in range(w):
            regions.append((f"rank {r}'s slots", f"{k.slots} x {_mib(k.chunk_bytes)}", BLOCK_COLOURS[r]))
        for a in range(w):
            for b in range(w):
                if a != b:
                    regions.append((f"channel {a}→{b}", f"{k.slots} x {_mib(k.chunk_bytes)}", "#ffffff"))
        return regions

    def text(self) -> str:
        w, k = self.world, self.k
        lines = [f"the link of {w} ranks, in address order (one shared-memory block, mapped by every rank):"]
        lines += [f"  {label:<16}{detail}" for label, detail, _ in self._regions()]
        slots = w * k.slots * k.chunk_bytes
        channels = w * w * k.slots * k.chunk_bytes
        lines.append(f"  rank slots {_mib(slots)}, channels {_mib(channels)} (a channel per ordered pair)")
        return "\n".join(lines)

    def html(self) -> str:
        boxes = "".join(
            f'<div class="ember-box" style="background: {colour}; flex: {3 if label == "header" else 1}">'
            f"<b>{esc(label)}</b><br>{esc(detail)}</div>"
            for label, detail, colour in self._regions()
        )
        ranks = "".join(
            f'<div class="ember-box" style="background: {BLOCK_COLOURS[r]}; flex: 1">'
            f"rank {r}: ember:{r}'s address space maps it; it writes its slots, reads everyone's</div>"
            for r in range(self.world)
        )
        markup = (
            '<div class="ember-eccl">'
            f'<div class="ember-title">the link of {self.world} ranks, in address order</div>'
            f'<div class="ember-strip">{boxes}</div>'
            f'<div class="ember-strip">{ranks}</div>'
            '<div class="ember-note">Rounds go through the ranks\' slots (every rank reads every slot of a '
            "round); point-to-point messages and the ring go through the channels (one reader each).</div>"
            "</div>"
        )
        return inline(markup, _CSS)


def ring_steps(world: int) -> list[tuple[str, list[tuple[int, int, str]]]]:
    """The ring all-reduce's steps, as `allReduceRing` runs them: for each step, and each rank, the
    block it sends to the next rank, the block it receives from the previous one, and what it does
    with what it receives ("adds", "adds, completes" or "keeps")."""
    steps = []
    for k in range(world - 1):  # reduce-scatter; its last step is fused with the all-gather's first
        last = k == world - 2
        what = ["adds"] * world if not last else [f"adds, completes; gets b{r} too" for r in range(world)]
        row = [((r - k) % world, (r - k - 1) % world, what[r]) for r in range(world)]
        steps.append((f"reduce-scatter {k + 1}" + (" + all-gather 1" if last else ""), row))
    for k in range(1, world - 1):
        row = [((r + 1 - k) % world, (r - k) % world, "keeps") for r in range(world)]
        steps.append((f"all-gather {k + 1}", row))
    return steps


class RingPicture(View):
    """The ring all-reduce on `world` ranks, step by step: who sends which block where."""

    def __init__(self, world: int = 4) -> None:
        self.world = world

    def text(self) -> str:
        w = self.world
        lines = [f"ring all-reduce on {w} ranks: rank r sends to rank r+1 (mod {w}); b = block"]
        for name, row in ring_steps(w):
            cells = "  ".join(
                f"r{r} b{send}→ {'+' if what.startswith('adds') else '='}b{recv}"
                for r, (send, recv, what) in enumerate(row)
            )
            lines.append(f"  {name:<32}{cells}")
        lines.append("  (b→: the block a rank sends; +b: the block it receives and adds; =b: keeps)")
        lines.append(f"  each rank sends {2 * (w - 1)} blocks of 1/{w} of the tensor and adds {w - 1}")
        return "\n".join(lines)

    def html(self) -> str:
        w = self.world
        arrows = " → ".join(f"rank {r}" for r in range(w)) + " → rank 0"
        head = "".join(f"<th>rank {r}</th>" for r in range(w))
        rows = []
        for name, row in ring_steps(w):
            cells = "".join(
                f'<td style="background: {BLOCK_COLOURS[recv]}">sends b{send}, gets b{recv}: {esc(what)}</td>'
                for send, recv, what in row
            )
            rows.append(f"<tr><th>{esc(name)}</th>{cells}</tr>")
        markup = (
            '<div class="ember-eccl">'
            f'<div class="ember-title">ring all-reduce on {w} ranks: {esc(arrows)}</div>'
            f"<table><tr><th>step</th>{head}</tr>{''.join(rows)}</table>"
            f'<div class="ember-note">The tensor is cut in {w} blocks b0…b{w - 1}; a cell is coloured by the '
            "block its rank receives in that step. After the reduce-scatter steps rank r holds block r+1 "
            "complete; the all-gather steps pass the complete blocks on.</div>"
            "</div>"
        )
        return inline(markup, _CSS)


@dataclass(frozen=True)
class Cost:
    handoffs: int  # waits for a peer's chunk, per rank
    read_bytes: int  # bytes each rank reads from its peers' slots or channels
    additions: int  # elements each rank adds


def one_shot_cost(nbytes: int, world: int, item: int = 4) -> Cost:
    """`oneShot`: one round per chunk; in each, every rank reads every peer's chunk and adds it."""
    rounds = math.ceil(nbytes / link_constants().chunk_bytes)
    return Cost(rounds, (world - 1) * nbytes, (world - 1) * nbytes // item)


def ring_cost(nbytes: int, world: int, item: int = 4) -> Cost:
    """`allReduceRing`: 2 (world - 1) blocks received per rank, in chunks; world - 1 of them added."""
    numel = nbytes // item
    block = math.ceil(numel / world) * item
    chunks = math.ceil(block / link_constants().chunk_bytes)
    return Cost(2 * (world - 1) * chunks, 2 * (world - 1) * block, (world - 1) * block // item)


def costs_table(sizes: list[int], worlds: list[int], item: int = 4) -> str:
    """A text table of both algorithms' costs per rank, and what `chooseAllreduce` takes (the
    one-shot below half a chunk)."""
    half = link_constants().chunk_bytes // 2
    lines = [
        f"{'size':>9} {'ranks':>5} | {'handoffs':>13} | {'KiB read':>15} | {'KiB added':>15} | chosen",
        f"{'':>15} | {'one-shot':>8} {'ring':>4} | {'one-shot':>8} {'ring':>6} | {'one-shot':>8} {'ring':>6} |",
    ]
    for size in sizes:
        for world in worlds:
            one, ring = one_shot_cost(size, world, item), ring_cost(size, world, item)
            chosen = "ring" if size >= half else "one-shot"
            read = [cost.read_bytes // 1024 for cost in (one, ring)]
            added = [cost.additions * item // 1024 for cost in (one, ring)]
            lines.append(
                f"{_mib(size):>9} {world:>5} | {one.handoffs:>8} {ring.handoffs:>4} | "
                f"{read[0]:>8} {read[1]:>6} | {added[0]:>8} {added[1]:>6} | {chosen}"
            )
    return "\n".join(lines)
