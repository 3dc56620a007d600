"""Memory snapshots as pictures: the device cache's segments, and allocated memory over time.

The input is a snapshot in CUDA's schema, as `torch.ember.memory._snapshot()` returns it (the
same dict PyTorch's own viewer, `torch.cuda._memory_viz`, reads): ``segments``, each with its
``blocks``, and ``device_traces``, the recorded actions. The views draw them with plain HTML
(no script, no SVG: JupyterLab's sanitizer keeps neither in an untrusted notebook), so they show
offline, in the static book and in JupyterLab alike. Allocation stacks are shown by function
name and line, never by file path (a notebook cell's file name is a temporary path).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from book.display.widgets.html import esc, inline, picture_css, swatches
from book.display.widgets.view import View

MIB = 2**20
# Block states in CUDA's schema, and how each is drawn.
_STATE_COLOURS = {
    "active_allocated": "#ea580c",
    "active_pending_free": "#facc15",
    "inactive": "#e5e7eb",
}
_STATE_NAMES = {
    "active_allocated": "allocated",
    "active_pending_free": "freed, in use by a stream",
    "inactive": "cached, free",
}
_COLUMNS = 120  # bars of the memory-over-time picture, at most


def mib(size: int) -> str:
    return f"{size / MIB:.1f} MiB"


def frame_text(frames: list[dict[str, Any]], skip: tuple[str, ...] = ()) -> str:
    """Where a block was allocated: the innermost Python frame of its stack outside
    PyTorch, as "allocated at function, line N" (no file path). A block with no stack was
    allocated before the history started."""
    if not frames:
        return "allocated before the history started"
    for frame in frames:
        filename = str(frame.get("filename", ""))
        if filename.endswith(".py") or "ipykernel" in filename:
            if any(part in filename for part in skip) or "/torch/" in filename:
                continue
            return f"allocated at {frame.get('name', '?')}, line {frame.get('line', '?')}"
    return "no Python frame"


@dataclass(frozen=True)
class SegmentSummary:
    address: int
    size: int
    kind: str  # "small" or "large"
    expandable: bool
    blocks: tuple[tuple[int, int, str, str], ...]  # offset, size, state, frame
    pool: int = 0  # the private pool of a graph that owns the segment (0: the device cache's own)

    @property
    def label(self) -> str:
        """Its kind, "expandable" if it is, and the graph pool that owns it, if one does."""
        return (
            self.kind
            + (", expandable" if self.expandable else "")
            + (f", graph pool {self.pool}" if self.pool else "")
        )

    @property
    def allocated(self) -> int:
        return sum(size for _, size, state, _ in self.blocks if state != "inactive")


def _pool_of(segment: dict[str, Any]) -> int:
    """The id of the graph pool that owns a segment: CUDA's `segment_pool_id`, a pair, (0, 0) for
    the device cache's own segments."""
    first, second = segment.get("segment_pool_id", (0, 0))
    return int(first) or int(second)


def segments_of(snapshot: dict[str, Any], device: int = 0) -> list[SegmentSummary]:
    found = []
    for segment in snapshot.get("segments", []):
        if segment.get("device", 0) != device:
            continue
        base = int(segment["address"])
        blocks = tuple(
            (
                int(block["address"]) - base,
                int(block["size"]),
                str(block["state"]),
                frame_text(block.get("frames", [])),
            )
            for block in segment.get("blocks", [])
        )
        found.append(
            SegmentSummary(
                base,
                int(segment["total_size"]),
                str(segment.get("segment_type", "large")),
                bool(segment.get("is_expandable", False)),
                blocks,
                _pool_of(segment),
            )
        )
    return sorted(found, key=lambda s: s.address)


_CSS = (
    picture_css("ember-memory", label_width=250)
    + """
.ember-memory .ember-lane { flex-grow: 1; }
.ember-memory .ember-segment { position: relative; height: 14px; background: #f9fafb;
  border: 1px solid #9ca3af; border-radius: 2px; overflow: hidden; }
.ember-memory .ember-block { position: absolute; top: 0; height: 14px;
  border-right: 1px solid #ffffff; }
.ember-memory .ember-columns { display: flex; align-items: flex-end; height: 90px;
  border-bottom: 1px solid #9ca3af; }
.ember-memory .ember-column { flex-grow: 1; background: #ea580c; margin-right: 1px; }
.ember-memory .ember-swatch { border: 1px solid #9ca3af; }
"""
)


class SegmentsView(View):
    """The device cache's segments, each a bar as long as its size, its blocks inside it."""

    def __init__(self, snapshot: dict[str, Any], title: str, device: int = 0) -> None:
        self.segments = segments_of(snapshot, device)
        self.title = title

    def totals(self) -> tuple[int, int]:
        """Reserved and allocated bytes, summed over the segments."""
        return sum(s.size for s in self.segments), sum(s.allocated for s in self.segments)

    def text(self) -> str:
        reserved, allocated = self.totals()
        count = len(self.segments)
        lines = [
            f"{self.title}: {count} segment{'' if count == 1 else 's'}, reserved "
            f"{mib(reserved)}, allocated {mib(allocated)}"
        ]
        for number, segment in enumerate(self.segments, start=1):
            states = Counter(state for _, _, state, _ in segment.blocks)
            blocks = ", ".join(
                f"{states[state]} {_STATE_NAMES[state]}" for state in _STATE_NAMES if states[state]
            )
            lines.append(f"  segment {number} ({segment.label}) {mib(segment.size)}: {blocks or 'no blocks'}")
        return "\n".join(lines)

    def html(self) -> str:
        largest = max((s.size for s in self.segments), default=1)
        rows = []
        for number, segment in enumerate(self.segments, start=1):
            blocks = []
            for offset, size, state, frame in segment.blocks:
                left = 100.0 * offset / segment.size
                width = 100.0 * size / segment.size
                tip = f"{mib(size)} {_STATE_NAMES.get(state, state)}"
                if state != "inactive":
                    tip += f", {frame}"
                blocks.append(
                    f'<div class="ember-block" title="{esc(tip)}" style="background: '
                    f"{_STATE_COLOURS.get(state, '#9ca3af')}; left: {left:.2f}%; "
                    f'width: {width:.2f}%"></div>'
                )
            label = f"{number}: {segment.label} {mib(segment.size)}"
            rows.append(
                '<div class="ember-row">'
                f'<div class="ember-label">{esc(label)}</div><div class="ember-lane">'
                f'<div class="ember-segment" style="width: {100.0 * segment.size / largest:.2f}%">'
                f"{''.join(blocks)}</div></div></div>"
            )
        reserved, allocated = self.totals()
        legend = swatches((colour, _STATE_NAMES[state]) for state, colour in _STATE_COLOURS.items())
        markup = (
            '<div class="ember-memory">'
            f'<div class="ember-title">{esc(self.title)}: reserved {mib(reserved)}, '
            f"allocated {mib(allocated)}</div>"
            + "".join(rows)
            + f'<div class="ember-legend">{legend} (hover a block for its stack)</div>'
            + "</div>"
        )
        return inline(markup, _CSS)


def _active_now(snapshot: dict[str, Any], device: int) -> int:
    """Bytes in the blocks the snapshot's segments hold for users (allocated, or freed with
    record_stream events still pending): what the trace's allocs and frees add up to at its end."""
    return sum(
        int(block["size"])
        for segment in snapshot.get("segments", [])
        if segment.get("device", 0) == device
        for block in segment.get("blocks", [])
        if block.get("state") in ("active_allocated", "active_pending_free")
    )


def _changes(snapshot: dict[str, Any], device: int) -> list[int]:
    """What each recorded action changed in the bytes in use: +size for an alloc, -size for a
    completed free, 0 for the rest."""
    traces = snapshot.get("device_traces", [])
    entries = traces[device] if device < len(traces) else []
    changes = []
    for entry in entries:
        action = entry.get("action")
        size = int(entry.get("size", 0))
        changes.append(size if action == "alloc" else -size if action == "free_completed" else 0)
    return changes


def in_use_at_start(snapshot: dict[str, Any], device: int = 0) -> int:
    """Bytes in use when the trace starts. The trace may start in the middle of a run
    (recording switched on late, or a ring buffer that dropped its oldest entries), so they are
    not in it: they are what the snapshot's segments hold at the end, less what the trace added."""
    return max(0, _active_now(snapshot, device) - sum(_changes(snapshot, device)))


def allocated_over_time(snapshot: dict[str, Any], device: int = 0) -> list[int]:
    """Bytes in use after each recorded action: those in use at the trace's start, plus its
    allocs, minus its completed frees."""
    current = in_use_at_start(snapshot, device)
    curve = []
    for change in _changes(snapshot, device):
        current += change
        curve.append(current)
    return curve


class MemoryOverTimeView(View):
    """Allocated memory after each recorded allocator action, as columns."""

    def __init__(self, snapshot: dict[str, Any], title: str, device: int = 0) -> None:
        self.curve = allocated_over_time(snapshot, device)
        self.start = in_use_at_start(snapshot, device)
        self.title = title

    def text(self) -> str:
        if not self.curve:
            return f"{self.title}: no recorded actions"
        peak = max(self.start, *self.curve)
        return (
            f"{self.title}: {len(self.curve)} actions\n"
            f"  allocated at the start {mib(self.start)}, peak {mib(peak)}, "
            f"at the end {mib(self.curve[-1])}"
        )

    def html(self) -> str:
        curve = self.curve
        step = max(1, -(-len(curve) // _COLUMNS))
        columns = [max(curve[i : i + step]) for i in range(0, len(curve), step)]
        peak = max(columns, default=0) or 1
        bars = "".join(
            f'<div class="ember-column" title="{esc(mib(value))}" '
            f'style="height: {100.0 * value / peak:.1f}%"></div>'
            for value in columns
        )
        markup = (
            '<div class="ember-memory">'
            f'<div class="ember-title">{esc(self.title)} (peak {mib(max(curve, default=0))})</div>'
            f'<div class="ember-columns">{bars}</div>'
            '<div class="ember-legend">recorded allocator actions, in order →</div>'
            "</div>"
        )
        return inline(markup, _CSS)


def segments(snapshot: dict[str, Any], title: str = "device memory", device: int = 0) -> SegmentsView:
    """The picture of a snapshot's segments on one ember device."""
    return SegmentsView(snapshot, title, device)


def memory_over_time(
    snapshot: dict[str, Any], title: str = "allocated memory", device: int = 0
) -> MemoryOverTimeView:
    """The picture of a snapshot's trace: allocated bytes after each action."""
    return MemoryOverTimeView(snapshot, title, device)


def live_by_frame(snapshot: dict[str, Any], device: int = 0) -> list[tuple[str, int, int]]:
    """Allocated blocks grouped by the Python line that allocated them: (frame, bytes, blocks)."""
    sizes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for segment in segments_of(snapshot, device):
        for _, size, state, frame in segment.blocks:
            if state == "active_allocated":
                sizes[frame] += size
                counts[frame] += 1
    return [(frame, sizes[frame], counts[frame]) for frame, _ in sizes.most_common()]
