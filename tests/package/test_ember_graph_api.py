"""torch.ember's graph API under torch.cuda's names: `torch.ember.graph` (a side stream by default, a pool by
handle or shared with another graph), `torch.ember.graph_pool_handle`, `torch.ember.EmberGraph` with
CUDAGraph's capture_begin keywords, and the memory a graph holds, given back by reset()."""

from __future__ import annotations

import contextlib
import gc
import threading

import pytest
import torch
import torch_ember  # noqa: F401
from torch import nn


def test_graph_captures_on_a_side_stream_and_replays_eager_code() -> None:
    x = torch.zeros(4, device="ember")
    before = torch.ember.current_stream()
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph):
        assert torch.ember.current_stream() != before  # a side stream, as torch.cuda.graph
        x += 1
    assert torch.ember.current_stream() == before
    assert x.cpu().tolist() == [0.0] * 4  # recorded, not run
    graph.replay()
    graph.replay()
    assert x.cpu().tolist() == [2.0] * 4
    graph.reset()


def test_graphs_share_a_pool_by_handle_and_by_pool() -> None:
    x = torch.ones(4, device="ember")
    handle = torch.ember.graph_pool_handle()
    assert handle != torch.ember.graph_pool_handle()  # each handle is a new pool
    first, second = torch.ember.EmberGraph(), torch.ember.EmberGraph()
    with torch.ember.graph(first, pool=handle):
        y = x * 3
    with torch.ember.graph(second, pool=first.pool()):
        z = y + 1
    assert first.pool() == second.pool() == handle
    first.replay()
    second.replay()
    assert y.cpu().tolist() == [3.0] * 4 and z.cpu().tolist() == [4.0] * 4
    first.reset()
    second.reset()


def test_capture_begin_takes_cuda_graphs_keywords() -> None:
    x = torch.full((3,), 2.0, device="ember")
    handle = torch.ember.graph_pool_handle()
    graph = torch.ember.EmberGraph()
    with torch.ember.stream(torch.ember.Stream()):
        graph.capture_begin(pool=handle, capture_error_mode="thread_local")
        out = x * x
        graph.capture_end()
    assert graph.pool() == handle
    graph.replay()
    assert out.cpu().tolist() == [4.0] * 3
    graph.reset()


def test_a_graphs_memory_is_kept_until_reset_then_returned() -> None:
    torch.ember.synchronize()
    torch.ember.empty_cache()
    allocated, reserved = torch.ember.memory_allocated(), torch.ember.memory_reserved()
    x = torch.ones(1 << 16, device="ember")
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph):
        out = (x * 2 + 1).relu()  # temporaries and a result from the graph's private pool
    del out
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() > reserved + x.nbytes  # the pool stays reserved for replays
    graph.replay()
    graph.reset()
    del x
    torch.ember.empty_cache()
    assert torch.ember.memory_allocated() == allocated
    assert torch.ember.memory_reserved() == reserved


def test_a_replayed_eager_training_step_equals_the_eager_steps() -> None:
    def make() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64)).to("ember")
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    x, y = torch.randn(8, 64).to("ember"), torch.randn(8, 64).to("ember")

    def step(model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        optimizer.zero_grad(set_to_none=False)
        ((model(x) - y) ** 2).mean().backward()
        optimizer.step()

    eager, eager_opt = make()
    for _ in range(3):
        step(eager, eager_opt)
    captured, captured_opt = make()
    side = torch.ember.Stream()
    with torch.ember.stream(side):
        step(captured, captured_opt)  # warm-up: gradients and momentum exist before the capture
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph, stream=side):
        step(captured, captured_opt)
    graph.replay()
    graph.replay()
    for a, b in zip(eager.parameters(), captured.parameters(), strict=True):
        assert torch.equal(a.cpu(), b.cpu())
    graph.reset()


def test_the_memory_snapshot_files_the_graphs_segments_under_its_pool() -> None:
    x = torch.ones(1 << 16, device="ember")
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph):
        y = x * 2
    pools = {
        segment["segment_pool_id"]
        for segment in torch.ember.memory._snapshot()["segments"]
        if any(block["address"] == y.data_ptr() for block in segment["blocks"])
    }
    assert pools == {graph.pool()} and graph.pool() != (0, 0)
    graph.reset()


@pytest.mark.parametrize(
    ("mode", "refused_here", "refused_elsewhere"),
    [("global", True, True), ("thread_local", True, False), ("relaxed", False, False)],
)
def test_capture_error_modes_decide_who_may_synchronize_the_device(
    mode: str, refused_here: bool, refused_elsewhere: bool
) -> None:
    # A device synchronize is ember's potentially unsafe call (CUDA's cudaMalloc-like ones): global refuses
    # it from every thread, thread_local from the capturing thread only, relaxed from none.
    for elsewhere, refused in ((False, refused_here), (True, refused_elsewhere)):
        x = torch.zeros(4, device="ember")
        errors: list[str] = []

        def synchronize(errors: list[str] = errors) -> None:
            try:
                torch.ember.synchronize()
            except RuntimeError as error:
                errors.append(str(error))

        graph = torch.ember.EmberGraph()
        context = pytest.raises(RuntimeError, match="invalidated by emDeviceSynchronize")
        with context if refused else contextlib.nullcontext():
            with torch.ember.graph(graph, capture_error_mode=mode):  # type: ignore[arg-type]
                x.add_(1)
                if elsewhere:
                    thread = threading.Thread(target=synchronize)
                    thread.start()
                    thread.join()
                else:
                    synchronize()
        assert bool(errors) == refused
        if refused:
            assert "operation not permitted when stream is capturing" in errors[0]
        else:
            graph.replay()
            assert x.cpu().tolist() == [1.0] * 4
            graph.reset()
        del x, graph
        gc.collect()  # pytest.raises keeps this frame alive: free x now, not in a later test
