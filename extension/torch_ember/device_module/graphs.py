"""Graphs on ember under torch.cuda's names: `torch.ember.graph`, `torch.ember.graph_pool_handle` and
`torch.ember.EmberGraph` (torch.cuda.CUDAGraph's counterpart).

The work is torch.accelerator.Graph's, which reaches ember's implementation (csrc/runtime/EmberGraph.cpp)
through PyTorch's graph registry; this module adds what torch.cuda has on top of it: a capture on a side
stream by default, pools shared by handle, and capture_begin's keyword arguments.
"""

from __future__ import annotations

import gc
import itertools
from types import TracebackType
from typing import Literal

import torch

from .streams import Stream, StreamContext

CaptureErrorMode = Literal["default", "global", "thread_local", "relaxed"]

# Pool ids made by graph_pool_handle. A graph that gets no pool makes its own in C++ from 1 upwards;
# these start far above, so the two kinds never meet (an id only keys the allocator's private cache).
_handles = itertools.count(1 << 40)


def graph_pool_handle() -> tuple[int, int]:
    """An id for a memory pool graphs can share (`torch.cuda.graph_pool_handle`): pass it as `pool=`."""
    return (next(_handles), 0)


class EmberGraph(torch.accelerator.Graph):
    """A graph of ember work, captured once and replayed (`torch.cuda.CUDAGraph`'s counterpart).

    `capture_begin` takes CUDAGraph's keywords; the rest (replay, reset, pool, ...) is
    torch.accelerator.Graph's.
    """

    def capture_begin(  # type: ignore[override]
        self, pool: tuple[int, int] | None = None, capture_error_mode: CaptureErrorMode = "global"
    ) -> None:
        if pool is not None:
            self.graph_pool = pool
        self.capture_error_mode = capture_error_mode
        super().capture_begin()


_side_stream: Stream | None = None


class graph:  # noqa: N801 - torch.cuda.graph's name
    """Captures the work of its block into `ember_graph` (`torch.cuda.graph`'s counterpart).

    As on CUDA: it synchronizes, collects garbage and empties the cache, then captures on `stream`, by
    default a side stream shared by every capture in the process (the current stream may be the default
    stream, which other work uses). `pool` shares a memory pool (`graph_pool_handle()` or another graph's
    `pool()`). `capture_error_mode` is passed to capture_begin.
    """

    def __init__(
        self,
        ember_graph: torch.accelerator.Graph,
        pool: tuple[int, int] | None = None,
        stream: torch.Stream | None = None,
        capture_error_mode: CaptureErrorMode = "global",
    ) -> None:
        global _side_stream
        if stream is None:
            if _side_stream is None:
                _side_stream = Stream()
            stream = _side_stream
        self.ember_graph = ember_graph
        self.pool = pool
        self.capture_error_mode = capture_error_mode
        self.stream_context = StreamContext(stream)

    def __enter__(self) -> None:
        torch.ember.synchronize()
        gc.collect()
        torch.ember.empty_cache()
        self.stream_context.__enter__()
        if self.pool is not None:
            self.ember_graph.graph_pool = self.pool
        self.ember_graph.capture_error_mode = self.capture_error_mode
        torch.accelerator.Graph.capture_begin(self.ember_graph)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            self.ember_graph.capture_end()
        finally:
            self.stream_context.__exit__(exc_type, exc, traceback)
