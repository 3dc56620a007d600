"""A profiled run as a picture: host threads above, ember streams below, on one time axis.

The data is what `torch.profiler` exported (`prof.export_chrome_trace`): Kineto's Chrome trace
JSON, read back, never composed by hand. `Timeline.of(trace)` keeps the operators each host thread
ran at the top level (the ones no other operator on that thread encloses) and every device
activity (kernels, copies) on its stream's track. The view draws each as a bar at its measured
place; the text view says only what holds on every run (which tracks, how many of what), since
the places themselves change from run to run.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from book.display.widgets.html import esc, inline, picture_css, swatches
from book.display.widgets.view import View

# Kineto's categories ("cat") for the activities this picture shows.
HOST_OPERATOR = "cpu_op"
DEVICE_KINDS = {"kernel": "kernel", "gpu_memcpy": "copy", "gpu_memset": "memset"}
# Thin bars still show: an activity gets at least this share of the axis.
MIN_WIDTH_PERCENT = 0.25
LABEL_WIDTH = 24  # columns of a track's label in the text view


@dataclass(frozen=True)
class Span:
    name: str
    kind: str  # "operator", "kernel", "copy", "memset"
    start: float  # microseconds, as the trace has them
    end: float


@dataclass(frozen=True)
class Track:
    label: str  # "host thread 1", "ember:0 stream 2"
    device: bool
    spans: tuple[Span, ...]

    def counts(self) -> Counter[str]:
        return Counter(span.kind for span in self.spans)

    @property
    def busy(self) -> float:
        """How long the spans last, summed (microseconds)."""
        return sum(span.end - span.start for span in self.spans)

    @property
    def bounds(self) -> tuple[float, float]:
        """When the first span starts and the last one ends (microseconds)."""
        if not self.spans:
            raise ValueError(f"{self.label} has no spans")
        return min(s.start for s in self.spans), max(s.end for s in self.spans)


@dataclass(frozen=True)
class Timeline:
    tracks: tuple[Track, ...]
    start: float
    end: float

    @classmethod
    def of(cls, trace: dict[str, Any] | str | Path) -> Timeline:
        """Read a Chrome trace (a dict, or the path `export_chrome_trace` wrote)."""
        data = trace if isinstance(trace, dict) else json.loads(Path(trace).read_text())
        events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
        host: dict[Any, list[Span]] = {}
        device: dict[tuple[Any, Any], list[Span]] = {}
        for event in events:
            start = float(event["ts"])
            span_end = start + float(event["dur"])
            category = event.get("cat", "")
            if category == HOST_OPERATOR:
                span = Span(event["name"], "operator", start, span_end)
                host.setdefault((event["pid"], event["tid"]), []).append(span)
            elif category in DEVICE_KINDS:
                span = Span(event["name"], DEVICE_KINDS[category], start, span_end)
                device.setdefault((event["pid"], event["tid"]), []).append(span)
        tracks: list[Track] = []
        # Host threads in the order they first ran an operator (their ids change per run).
        ordered = sorted(host.items(), key=lambda item: min(s.start for s in item[1]))
        for number, (_thread, spans) in enumerate(ordered, start=1):
            tracks.append(Track(f"host thread {number}", False, _top_level(spans)))
        for (pid, tid), spans in sorted(device.items(), key=lambda item: _ids(item[0])):
            spans.sort(key=lambda s: s.start)
            tracks.append(Track(f"ember:{pid} stream {tid}", True, tuple(spans)))
        every = [span for track in tracks for span in track.spans]
        if not every:
            return cls((), 0.0, 0.0)
        return cls(tuple(tracks), min(s.start for s in every), max(s.end for s in every))

    def track(self, label: str) -> Track:
        for track in self.tracks:
            if track.label == label:
                return track
        raise KeyError(f"no track {label!r}; the tracks are {[t.label for t in self.tracks]}")


def _ids(key: tuple[Any, Any]) -> tuple[int, int]:
    def number(value: Any) -> int:
        try:
            return int(value)
        except (TypeError, ValueError):
            return 1 << 30

    return number(key[0]), number(key[1])


def _top_level(spans: list[Span]) -> tuple[Span, ...]:
    """The spans no earlier span of the same thread encloses."""
    spans = sorted(spans, key=lambda s: (s.start, -s.end))
    kept: list[Span] = []
    for span in spans:
        if kept and span.end <= kept[-1].end:
            continue
        kept.append(span)
    return tuple(kept)


def overlap(first: Track, second: Track) -> float:
    """How long (microseconds) some span of `first` and some span of `second` run at once."""
    total = 0.0
    for a in first.spans:
        for b in second.spans:
            total += max(0.0, min(a.end, b.end) - max(a.start, b.start))
    return total


def share_within(track: Track, start: float, end: float) -> float:
    """The share of `track`'s busy time that falls between `start` and `end` (a ratio
    within one run, like `overlap_share`)."""
    busy = track.busy
    inside = sum(max(0.0, min(span.end, end) - max(span.start, start)) for span in track.spans)
    return inside / busy if busy > 0 else 0.0


def overlap_share(first: Track, second: Track) -> float:
    """The share of `first`'s busy time during which some span of `second` ran: a ratio
    within one run, which a saved output can show (the durations change per run)."""
    busy = first.busy
    return overlap(first, second) / busy if busy > 0 else 0.0


# ---- the view ------------------------------------------------------------------------------

_KIND_COLOURS = {
    "operator": "#93c5fd",
    "kernel": "#ea580c",
    "copy": "#16a34a",
    "memset": "#a855f7",
}
LABEL_PX = 150  # the labels' column; the time axis starts after it
_CSS = (
    picture_css("ember-timeline", label_width=LABEL_PX)
    + f"""
.ember-timeline .ember-lane {{ position: relative; flex-grow: 1; height: 14px;
  background: #f3f4f6; border-radius: 2px; overflow: hidden; }}
.ember-timeline .ember-span {{ position: absolute; top: 1px; height: 12px;
  border-radius: 1px; opacity: 0.9; }}
.ember-timeline .ember-axis {{ display: flex; justify-content: space-between;
  margin-left: {LABEL_PX}px; color: #6b7280; }}
"""
)


class TimelineView(View):
    """A `Timeline` shown: text (what holds on every run) and HTML (the bars where they ran)."""

    def __init__(self, timeline: Timeline, title: str = "timeline") -> None:
        self.timeline = timeline
        self.title = title

    def text(self) -> str:
        lines = [f"{self.title}: {len(self.timeline.tracks)} tracks"]
        for track in self.timeline.tracks:
            counts = track.counts()
            what = ", ".join(f"{counts[kind]} {_plural(kind, counts[kind])}" for kind in sorted(counts))
            lines.append(f"  {track.label:<{LABEL_WIDTH}}{what or 'nothing'}")
        return "\n".join(lines)

    def html(self) -> str:
        timeline = self.timeline
        length = max(timeline.end - timeline.start, 1e-9)
        rows = []
        for track in timeline.tracks:
            bars = []
            for span in track.spans:
                left = 100.0 * (span.start - timeline.start) / length
                width = max(100.0 * (span.end - span.start) / length, MIN_WIDTH_PERCENT)
                colour = _KIND_COLOURS[span.kind]
                bars.append(
                    f'<div class="ember-span" title="{esc(span.name)}" '
                    f'style="background: {colour}; left: {left:.2f}%; width: {width:.2f}%"></div>'
                )
            rows.append(
                '<div class="ember-row">'
                f'<div class="ember-label">{esc(track.label)}</div>'
                f'<div class="ember-lane">{"".join(bars)}</div></div>'
            )
        kinds = sorted({span.kind for track in timeline.tracks for span in track.spans})
        legend = swatches((_KIND_COLOURS[kind], kind) for kind in kinds)
        markup = (
            '<div class="ember-timeline">'
            f'<div class="ember-title">{esc(self.title)}</div>'
            + "".join(rows)
            + '<div class="ember-axis"><span>start</span><span>time →</span><span>end</span></div>'
            + f'<div class="ember-legend">{legend} (hover a bar for its name)</div>'
            + "</div>"
        )
        return inline(markup, _CSS)


def _plural(kind: str, count: int) -> str:
    noun = {"operator": "top-level operator", "copy": "copy"}.get(kind, kind)
    if count == 1:
        return noun
    return "copies" if noun == "copy" else noun + "s"


def timeline(trace: Timeline | dict[str, Any] | str | Path, title: str = "timeline") -> TimelineView:
    """The picture of a Chrome trace that `torch.profiler` exported (or of its `Timeline`)."""
    return TimelineView(trace if isinstance(trace, Timeline) else Timeline.of(trace), title)
