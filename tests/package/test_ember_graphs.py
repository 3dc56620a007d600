"""torch.accelerator.Graph on the installed torch_ember: capture records compiled kernels without running
them, replay runs them again on the same buffers, what cannot be captured is a clear error that ends the
capture, and the graph's memory is kept until reset."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch


def add_ten(t: torch.Tensor) -> torch.Tensor:
    for _ in range(10):
        t = t + 1
    return t


@pytest.fixture(scope="module")
def compiled_add_ten():  # noqa: ANN201
    compiled = torch.compile(add_ten)
    compiled(torch.zeros(4, device="ember"))  # compile outside any capture
    return compiled


def capture(fn, *args):  # noqa: ANN001, ANN002, ANN201
    graph = torch.accelerator.Graph()
    with torch.ember.stream(torch.ember.Stream()), graph:
        out = fn(*args)
    return graph, out


def test_capture_records_without_running_and_replay_repeats(compiled_add_ten) -> None:  # noqa: ANN001
    x = torch.zeros(4, device="ember")
    graph, out = capture(compiled_add_ten, x)
    assert out.cpu().tolist() == [0.0] * 4  # captured only (the pool's fresh block is zeroed by nothing:
    # the driver's new pages read as zero)
    pointer = out.data_ptr()
    graph.replay()
    assert out.cpu().tolist() == [10.0] * 4
    x.fill_(1)
    graph.replay()
    graph.replay()
    assert out.cpu().tolist() == [11.0] * 4 and out.data_ptr() == pointer  # same buffers, input read again
    graph.reset()


def test_replay_runs_in_order_on_the_current_stream(compiled_add_ten) -> None:  # noqa: ANN001
    x = torch.zeros(4, device="ember")
    graph, out = capture(compiled_add_ten, x)
    stream = torch.ember.Stream()
    with torch.ember.stream(stream):
        torch.ember._sleep(20_000)
        graph.replay()  # waits for the sleep: stream order
        assert stream.query()
    assert out.cpu().tolist() == [10.0] * 4
    graph.reset()


@pytest.mark.parametrize(
    ("work", "call"),
    [
        # An operator whose result's size depends on values: no meta kernel can size it, so it is refused
        # with an in-place launch. Eager kernels that own their arguments are recorded (test_ember_eager_graphs.py).
        (lambda x: torch.unique(x), "emLaunchKernel"),
        # nonzero's meta kernel, in Python, raises NotImplementedError instead: refused the same way.
        (lambda x: torch.nonzero(x), "emLaunchKernel"),
        (lambda x: x.cpu(), "emMemcpy"),  # a copy to the host waits for the stream
        (lambda x: torch.ember.synchronize(), "emDeviceSynchronize"),
    ],
)
def test_what_cannot_be_captured_fails_with_a_clear_error(work, call: str) -> None:  # noqa: ANN001
    x = torch.zeros(4, device="ember")
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match=rf"the graph capture failed: .* invalidated by {call}\."):
        with torch.ember.stream(torch.ember.Stream()), graph:
            work(x)
    with pytest.raises(RuntimeError, match="replay\\(\\) of a graph that holds no capture"):
        graph.replay()
    # The stream is usable again: nothing is left capturing.
    assert (x + 1).cpu().tolist() == [1.0] * 4


def test_the_graph_keeps_its_memory_until_reset(compiled_add_ten) -> None:  # noqa: ANN001
    x = torch.zeros(1 << 18, device="ember")  # 1 MiB: a segment of its own
    compiled_add_ten(x)
    torch.ember.empty_cache()
    free_before, _ = torch.ember.mem_get_info()
    graph, out = capture(compiled_add_ten, x)
    del out
    torch.ember.empty_cache()  # the cache lets go; the driver's graph still holds the buffers
    free_with_graph, _ = torch.ember.mem_get_info()
    assert free_with_graph < free_before
    graph.reset()
    torch.ember.empty_cache()
    free_after, _ = torch.ember.mem_get_info()
    assert free_after == free_before


def test_pools_are_apart_per_graph_and_shared_on_request(compiled_add_ten) -> None:  # noqa: ANN001
    x = torch.zeros(4, device="ember")
    first, _ = capture(compiled_add_ten, x)
    second, _ = capture(compiled_add_ten, x)
    assert first.pool() != second.pool() and first.pool() != (0, 0)
    shared = torch.accelerator.Graph(pool=first.pool())
    with torch.ember.stream(torch.ember.Stream()), shared:
        compiled_add_ten(x)
    assert shared.pool() == first.pool()
    for graph in (first, second, shared):
        graph.reset()
    assert first.pool() == (0, 0)


def test_a_graph_replays_only_what_it_holds() -> None:
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="holds no capture"):
        graph.replay()
    with pytest.raises(RuntimeError, match="capture_end\\(\\) without capture_begin\\(\\)"):
        graph.capture_end()


def test_import_torch_ember_alone_gives_compile_export_and_graphs() -> None:
    # A fresh process: nothing but `import torch_ember` registers the compiler and the graphs.
    code = """
import io, sys, torch, torch_ember
# Registered when Dynamo and Inductor are first imported, not before: they take seconds to import.
assert "torch._dynamo" not in sys.modules and "torch._inductor.compile_fx" not in sys.modules
x = torch.ones(3, device="ember")
f = torch.compile(lambda t: (t * 2).sin() + 1)
assert torch.allclose(f(x).cpu(), (torch.ones(3) * 2).sin() + 1)
program = torch.export.export(torch.nn.Linear(3, 2).to("ember"), (x[None],))
buffer = io.BytesIO(); torch.export.save(program, buffer); buffer.seek(0)
assert torch.export.load(buffer).module()(x[None]).device.type == "ember"
graph = torch.accelerator.Graph()
with torch.ember.stream(torch.ember.Stream()), graph:
    y = f(x)
graph.replay()
assert torch.allclose(y.cpu(), (torch.ones(3) * 2).sin() + 1)
print("ok")
"""
    environment = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    child = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=environment
    )
    assert child.returncode == 0 and child.stdout.strip() == "ok", child.stderr[-2000:]
