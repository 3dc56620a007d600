"""The profiler chapter's pictures: read from a Chrome trace and a snapshot, drawn without script."""

from __future__ import annotations

import re

import pytest

from book.display.widgets import memory_views, timeline

MIB = 2**20


def _trace() -> dict:
    def op(name: str, ts: float, dur: float, tid: int = 7) -> dict:
        return {
            "ph": "X",
            "cat": "cpu_op",
            "name": name,
            "pid": 99,
            "tid": tid,
            "ts": ts,
            "dur": dur,
        }

    def device(cat: str, name: str, ts: float, dur: float, stream: int) -> dict:
        return {
            "ph": "X",
            "cat": cat,
            "name": name,
            "pid": 0,
            "tid": stream,
            "ts": ts,
            "dur": dur,
        }

    return {
        "traceEvents": [
            op("aten::linear", 0, 50),
            op("aten::addmm", 5, 40),  # inside linear: not top level
            op("aten::relu", 60, 10),
            op("autograd::engine", 80, 20, tid=8),
            device("kernel", "addmm_kernel", 10, 30, 0),
            device("kernel", "relu_kernel", 62, 5, 0),
            device("gpu_memcpy", "Memcpy HtoD", 20, 40, 3),
            {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "ember"}},
        ]
    }


def test_timeline_keeps_top_level_operators_and_one_track_per_stream() -> None:
    tl = timeline.Timeline.of(_trace())
    assert [t.label for t in tl.tracks] == [
        "host thread 1",
        "host thread 2",
        "ember:0 stream 0",
        "ember:0 stream 3",
    ]
    assert [s.name for s in tl.track("host thread 1").spans] == [
        "aten::linear",
        "aten::relu",
    ]
    assert tl.track("ember:0 stream 0").counts() == {"kernel": 2}
    assert (tl.start, tl.end) == (0.0, 100.0)
    # the copy (20..60) overlaps the first kernel (10..40) for 20 us and the second not at all
    assert timeline.overlap(tl.track("ember:0 stream 0"), tl.track("ember:0 stream 3")) == 20.0
    # ... which is half of the copy's 40 us, and 20 of the kernels' 30 + 5 us
    compute, side = tl.track("ember:0 stream 0"), tl.track("ember:0 stream 3")
    assert timeline.overlap_share(side, compute) == 0.5
    assert timeline.overlap_share(compute, side) == 20.0 / 35.0 and compute.busy == 35.0
    assert timeline.overlap_share(timeline.Track("idle", True, ()), compute) == 0.0
    # the copy (20..60) between 10 and 40: half of it; the kernels span 10..67
    assert timeline.share_within(side, 10.0, 40.0) == 0.5
    assert timeline.share_within(side, *compute.bounds) == 1.0 and compute.bounds == (10.0, 67.0)
    with pytest.raises(ValueError, match="idle has no spans"):
        _ = timeline.Track("idle", True, ()).bounds


def test_timeline_view_places_bars_and_says_only_run_independent_facts() -> None:
    view = timeline.timeline(_trace(), "step")
    text = view.text()
    assert "ember:0 stream 3" in text and "1 copy" in text and "2 top-level operators" in text
    assert not re.search(r"\d+(\.\d+)? ?(us|ms)", text)
    html = view.html()
    assert "<script" not in html and "<svg" not in html
    # the copy starts at 20% of the 100 us span and lasts 40%
    assert 'title="Memcpy HtoD"' in html and "left: 20.00%; width: 40.00%" in html


def _snapshot() -> dict:
    frames = [{"filename": "/tmp/ipykernel_1/123.py", "line": 4, "name": "train_step"}]
    return {
        "segments": [
            {
                "device": 0,
                "address": 4 * MIB,
                "total_size": 4 * MIB,
                "segment_type": "large",
                "blocks": [
                    {
                        "address": 4 * MIB,
                        "size": MIB,
                        "state": "active_allocated",
                        "frames": frames,
                    },
                    {
                        "address": 5 * MIB,
                        "size": 3 * MIB,
                        "state": "inactive",
                        "frames": [],
                    },
                ],
            },
            {
                "device": 0,
                "address": 0,
                "total_size": 2 * MIB,
                "segment_type": "small",
                "blocks": [{"address": 0, "size": 2 * MIB, "state": "inactive", "frames": []}],
            },
        ],
        "device_traces": [
            [
                {"action": "segment_alloc", "addr": 4 * MIB, "size": 4 * MIB},
                {"action": "alloc", "addr": 4 * MIB, "size": MIB},
                {"action": "alloc", "addr": 5 * MIB, "size": MIB},
                {"action": "free_requested", "addr": 5 * MIB, "size": MIB},
                {"action": "free_completed", "addr": 5 * MIB, "size": MIB},
            ]
        ],
    }


def test_segments_view_sums_and_orders_segments_and_hides_paths() -> None:
    view = memory_views.segments(_snapshot(), "after the step")
    assert view.totals() == (6 * MIB, MIB)
    lines = view.text().splitlines()
    assert lines[0] == "after the step: 2 segments, reserved 6.0 MiB, allocated 1.0 MiB"
    assert lines[1].startswith("  segment 1 (small) 2.0 MiB")
    assert "1 allocated, 1 cached, free" in lines[2]
    html = view.html()
    assert "allocated at train_step, line 4" in html and "/tmp/" not in html
    assert "left: 25.00%; width: 75.00%" in html  # the free block: 3 MiB at offset 1 MiB of 4


def test_memory_over_time_follows_allocs_and_completed_frees() -> None:
    assert memory_views.allocated_over_time(_snapshot()) == [
        0,
        MIB,
        2 * MIB,
        2 * MIB,
        MIB,
    ]
    text = memory_views.memory_over_time(_snapshot(), "step").text()
    assert text == ("step: 5 actions\n  allocated at the start 0.0 MiB, peak 2.0 MiB, at the end 1.0 MiB")
    assert memory_views.live_by_frame(_snapshot()) == [("allocated at train_step, line 4", MIB, 1)]
    assert memory_views.frame_text([]) == "allocated before the history started"
    torch_frame = {"filename": "/x/torch/nn/functional.py", "line": 1, "name": "linear"}
    assert memory_views.frame_text([torch_frame]) == "no Python frame"


def test_memory_over_time_counts_what_was_allocated_before_the_trace() -> None:
    snapshot = _snapshot()
    # the trace's first two actions were never recorded: the 4 MiB segment and the
    # 1 MiB block still alive were allocated before it
    snapshot["device_traces"] = [snapshot["device_traces"][0][2:]]
    assert memory_views.allocated_over_time(snapshot) == [2 * MIB, 2 * MIB, MIB]
    assert memory_views.in_use_at_start(snapshot) == MIB
    text = memory_views.memory_over_time(snapshot, "late").text()
    assert text == ("late: 3 actions\n  allocated at the start 1.0 MiB, peak 2.0 MiB, at the end 1.0 MiB")


def test_segments_view_labels_the_segments_a_graph_pool_owns() -> None:
    snapshot = _snapshot()
    snapshot["segments"][0]["segment_pool_id"] = (3, 0)  # the large segment (at 4 MiB), a graph's
    view = memory_views.segments(snapshot, "with a graph")
    lines = view.text().splitlines()
    assert lines[1].startswith("  segment 1 (small) 2.0 MiB")  # (0, 0) or absent: the cache's own
    assert lines[2].startswith("  segment 2 (large, graph pool 3) 4.0 MiB")
    assert "2: large, graph pool 3 4.0 MiB" in view.html()
