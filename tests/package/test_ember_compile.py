"""torch.compile and torch.export on the installed torch_ember (the compiler in torch_ember/compiler).

Compiled against eager on ember, and against the CPU, for a family of functions: pointwise chains,
reductions, matrix products, softmax, layer norm, a convolution model's training step, with
`fullgraph=True`, `dynamic=True` and `cpp_wrapper=True`, ember's custom operator and autocast inside a
graph. Tolerances are `torch.testing.assert_close`'s defaults per dtype, as in PyTorch's own Inductor
tests (float16 included: its defaults are the looser ones).

The generated kernels run as ember launches: `LaunchCounter` counts them through the driver's event
callback (one launch for a fused chain of eight operators that eager runs as eight), and a child
process shows that the device memory a compiled call wrote stays unreadable from the host.

Inductor's caches (in its default directory) stay on: every test compiles small graphs, and a warm
cache keeps the file fast. Their keys include ember's code generator (`CodegenVersion` in
torch_ember/compiler/inductor.py), so a changed compiler is not tested through stale graphs.

Bad input (a device index that does not exist, two ember devices in one graph) is a clear error, not a
crash.
"""

from __future__ import annotations

import copy
import ctypes
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from types import TracebackType

import pytest
import torch
import torch._dynamo.testing
import torch._inductor.utils
import torch.nn.functional as F
import torch_ember
from torch import nn
from torch._inductor.exc import InductorError
from torch_ember.bench import pointwise_chain

EMBER = torch.device("ember", 0)
EMBER_1 = torch.device("ember", 1)


# -- Counting launches --------------------------------------------------------------------------

EM_EVENT_KERNEL_LAUNCH = 3  # emEventKind's emEventKernelLaunch (csrc/driver/ember_driver.h)


class EmEvent(ctypes.Structure):
    """The driver's `emEvent` (csrc/driver/ember_driver.h), field for field."""

    _fields_ = [
        ("kind", ctypes.c_int),
        ("device", ctypes.c_int),
        ("peer_device", ctypes.c_int),
        ("memcpy_kind", ctypes.c_int),
        ("bytes", ctypes.c_size_t),
        ("num_buffers", ctypes.c_size_t),
        ("ptr", ctypes.c_void_p),
        ("stream", ctypes.c_int64),
        ("async_", ctypes.c_int),
        ("microseconds", ctypes.c_uint64),
        ("sync_event", ctypes.c_int64),
    ]


EVENT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.POINTER(EmEvent), ctypes.c_void_p)


class LaunchCounter:
    """Counts ember kernel launches while active: `with LaunchCounter() as launches: ...`, then
    `launches.count`, `launches.devices` (the device of each launch) and `launches.streams` (the
    stream id of each).

    It installs the driver's event callback (`emSetEventCallback`, one per process) on entry and
    removes it on exit. The driver may still finish a call into a callback after removing it, so the
    ctypes callback is one object that lives as long as the process (`_CALLBACK`)."""

    _active: LaunchCounter | None = None

    def __init__(self) -> None:
        self.devices: list[int] = []
        self.streams: list[int] = []

    @property
    def count(self) -> int:
        return len(self.devices)

    def __enter__(self) -> LaunchCounter:
        assert LaunchCounter._active is None, "one LaunchCounter at a time"
        torch.ember.synchronize()
        LaunchCounter._active = self
        assert _driver().emSetEventCallback(_CALLBACK, None) == 0
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        torch.ember.synchronize()
        assert _driver().emSetEventCallback(EVENT_CALLBACK(), None) == 0  # NULL: removed
        LaunchCounter._active = None


def _record(event: ctypes._Pointer[EmEvent], user: int | None) -> None:
    counter = LaunchCounter._active
    if counter is not None and event.contents.kind == EM_EVENT_KERNEL_LAUNCH:
        counter.devices.append(event.contents.device)
        counter.streams.append(event.contents.stream)


_CALLBACK = EVENT_CALLBACK(_record)


def _driver() -> ctypes.CDLL:
    library = ctypes.CDLL(torch_ember._C.__file__)
    library.emSetEventCallback.argtypes = [EVENT_CALLBACK, ctypes.c_void_p]
    library.emSetEventCallback.restype = ctypes.c_int
    return library


# -- Helpers ------------------------------------------------------------------------------------


def sample(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=generator, dtype=dtype)


def to_cpu(value: object) -> object:
    """A tensor, or a tuple of tensors, copied to the CPU."""
    return tuple(t.cpu() for t in value) if isinstance(value, tuple) else value.cpu()


def check_compiled(fn: Callable[..., object], *inputs: torch.Tensor, **options: object) -> object:
    """`torch.compile(fn, **options)` on ember against `fn` eagerly on ember and on the CPU; returns
    the compiled function's output."""
    compiled = torch.compile(fn, **options)
    on_ember = [x.to(EMBER) for x in inputs]
    got = compiled(*on_ember)
    for result in got if isinstance(got, tuple) else (got,):
        assert result.device == EMBER
    torch.testing.assert_close(to_cpu(got), to_cpu(fn(*on_ember)))
    torch.testing.assert_close(to_cpu(got), fn(*inputs))
    return got


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test starts with no compiled frames cached by Dynamo (Inductor's caches stay)."""
    torch._dynamo.reset()
    yield
    torch.ember.synchronize()


# -- Compiled equals eager ----------------------------------------------------------------------


def test_a_pointwise_chain_runs_as_one_launch() -> None:
    # The benchmark's chain (compiled_pointwise_chain_vs_eager): eight launches eagerly, one compiled.
    x = sample(1000)
    compiled = torch.compile(pointwise_chain)
    check_compiled(pointwise_chain, x)
    on_ember = x.to(EMBER)
    compiled(on_ember)  # compiled above already: a cache hit
    with LaunchCounter() as eager:
        pointwise_chain(on_ember)
    with LaunchCounter() as fused:
        result = compiled(on_ember)
    assert (eager.count, fused.count) == (8, 1)
    assert fused.devices == [0]
    torch.testing.assert_close(result.cpu(), pointwise_chain(x))


def reductions(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return x.sum(dim=1), x.amax(dim=0), x.mean(), (x * x).sum(dim=-1, keepdim=True)


@pytest.mark.parametrize(
    ("fn", "shapes"),
    [
        pytest.param(reductions, [(33, 17)], id="reductions"),
        pytest.param(lambda a, b: torch.relu(a @ b + 1), [(8, 16), (16, 12)], id="matmul"),
        pytest.param(lambda x: torch.softmax(x * 0.5, dim=-1), [(6, 40)], id="softmax"),
        pytest.param(lambda x, w, b: F.layer_norm(x, (24,), w, b), [(5, 24), (24,), (24,)], id="layer_norm"),
        pytest.param(lambda x: torch.cat([x, x[[0, 2]]]).cumsum(0), [(6, 3)], id="indexing"),
    ],
)
def test_compiled_equals_eager_and_the_cpu(fn: Callable[..., object], shapes: list[tuple[int, ...]]) -> None:
    check_compiled(fn, *(sample(*shape, seed=seed) for seed, shape in enumerate(shapes)))


def test_fullgraph_compiles_one_graph() -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.softmax(torch.tanh(x @ w), dim=-1).sum(dim=0)

    check_compiled(fn, sample(4, 8), sample(8, 8, seed=1), backend=counter, fullgraph=True)
    assert counter.frame_count == 1


def on_a_side_stream(x: torch.Tensor, side: torch.Stream) -> torch.Tensor:
    """CUDA's pattern for work on another stream: wait, run there, make the caller wait."""
    main = torch.ember.current_stream()
    side.wait_stream(main)
    with torch.ember.stream(side):
        y = (x * 2).relu()
    main.wait_stream(side)
    return y + 1


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_ember_streams_trace_into_one_graph(backend: str) -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    side = torch.ember.Stream()
    x = sample(64)
    compiled = torch.compile(on_a_side_stream, backend=counter, fullgraph=True)
    with LaunchCounter() as launches:
        result = compiled(x.to(EMBER), side)
    torch.testing.assert_close(result.cpu(), on_a_side_stream(x.to(EMBER), side).cpu())
    assert counter.frame_count == 1  # fullgraph=True: no graph break
    if backend == "inductor":  # two generated kernels: one on the side stream, then the caller's
        assert launches.streams == [side.stream_id, torch.ember.current_stream().stream_id]


def test_inductor_names_the_side_stream_in_the_wrapper() -> None:
    side = torch.ember.Stream()
    compiled = torch.compile(on_a_side_stream, fullgraph=True)
    _, (wrapper, *_) = torch._inductor.utils.run_and_get_code(compiled, sample(64).to(EMBER), side)
    body = wrapper[wrapper.index("def call") :]
    assert "with torch.ember.device(0):" in body  # the guard the stream variables live in
    side_block = body[body.index("with stream1:") :].split("with default_stream:")[0]
    assert "cpp_fused" in side_block  # the first kernel's call is inside the side stream's block


def product_on_a_side_stream(a: torch.Tensor, side: torch.Stream) -> torch.Tensor:
    main = torch.ember.current_stream()
    side.wait_stream(main)
    with torch.ember.stream(side):
        y = a @ a
    main.wait_stream(side)
    return y


def test_a_graph_of_extern_kernels_alone_gets_its_side_streams_guard() -> None:
    """No node of this graph is a generated kernel: ember's scheduling is created only while its code
    is generated, and the stream guard is arranged before that (EmberPythonWrapper)."""
    side = torch.ember.Stream()
    a = sample(16, 16)
    compiled = torch.compile(product_on_a_side_stream, fullgraph=True)
    result, (wrapper, *_) = torch._inductor.utils.run_and_get_code(compiled, a.to(EMBER), side)
    torch.testing.assert_close(result.cpu(), a @ a)
    assert "with torch.ember.device(0):" in wrapper and "with stream1:" in wrapper
    assert torch._inductor.scheduler.device_need_guard is torch._inductor.utils.device_need_guard


# Races made deterministic as in test_ember_streams.py: a stream is kept busy with `_sleep` far
# longer than the host needs to reach the read. Ember's kernels run on the host thread, in order
# on their stream, so only queued work (a sleep, a non_blocking copy from pinned memory) can race.
SLEEP_US = 300_000


def side_reads_callers_work(x: torch.Tensor, side: torch.Stream, fork: bool) -> torch.Tensor:
    main = torch.ember.current_stream()
    if fork:
        side.wait_stream(main)
    with torch.ember.stream(side):
        y = (x * 2).relu()
    main.wait_stream(side)
    return y + 1


def caller_reads_sides_work(host: torch.Tensor, side: torch.Stream, join: bool) -> torch.Tensor:
    main = torch.ember.current_stream()
    side.wait_stream(main)
    with torch.ember.stream(side):
        y = host.to(EMBER, non_blocking=True)
    if join:
        main.wait_stream(side)
    return y * 2 + 1


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_a_side_stream_waits_for_the_callers_queued_work(mode: str) -> None:
    """The graph's input is written by a copy queued on the caller's stream behind a sleep: the
    side stream reads it after the copy only if it waited (`side.wait_stream(main)`)."""
    side = torch.ember.Stream()
    fn = side_reads_callers_work
    run = fn if mode == "eager" else torch.compile(fn, fullgraph=True)
    x = torch.zeros(64, device=EMBER)
    for seed, fork in enumerate((True, False)):
        run(x, side, fork)  # compiled before the race
        host = sample(64, seed=seed).pin_memory()
        x.zero_()
        torch.ember._sleep(SLEEP_US)
        x.copy_(host, non_blocking=True)  # queued behind the sleep
        got = run(x, side, fork).cpu()
        assert torch.equal(got, fn(host, side, fork)) is fork  # without the wait: x still zeros


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_caller_waits_for_a_side_streams_queued_work(mode: str) -> None:
    """The side stream's copy is queued behind a sleep: the caller's stream reads its result after
    the copy only if it waited (`main.wait_stream(side)`)."""
    side = torch.ember.Stream()
    fn = caller_reads_sides_work
    run = fn if mode == "eager" else torch.compile(fn, fullgraph=True)
    for seed, join in enumerate((True, False)):
        host = sample(64, seed=seed).pin_memory()
        run(host, side, join)  # compiled before the race
        torch.ember.synchronize()
        host.copy_(sample(64, seed=seed + 10))  # values the block the copy lands in never held
        with torch.ember.stream(side):
            torch.ember._sleep(SLEEP_US)
        got = run(host, side, join).cpu()
        torch.ember.synchronize()
        assert torch.equal(got, host * 2 + 1) is join


def sin_on_a_side_stream(t: torch.Tensor, side: torch.Stream) -> torch.Tensor:
    main = torch.ember.current_stream()
    side.wait_stream(main)
    with torch.ember.stream(side):
        u = t.sin() * 2
    main.wait_stream(side)
    return u + 1


def test_streams_change_no_bit_of_a_compiled_result() -> None:
    """A side-stream graph computes what the same graph without streams does, bit for bit, and
    what eager does within assert_close's tolerance. Against the CPU's eager result,
    `torch.allclose`'s defaults (atol 1e-8) can fail by themselves: Inductor's sin and ATen's may
    differ by an ulp, which near a zero of 2 sin t + 1 is more than 1e-8 + 1e-5 * |result|.
    Whether an element lands there depends on the input and the vector ISA, not on the streams:
    with ATEN_CPU_CAPABILITY=default, chapter 18's input had one (1.2e-3, 6e-8 apart)."""
    side = torch.ember.Stream()
    t = sample(16, 256)
    with_streams = torch.compile(sin_on_a_side_stream, fullgraph=True)(t.to(EMBER), side).cpu()
    plain = torch.compile(lambda t: t.sin() * 2 + 1, fullgraph=True)(t.to(EMBER)).cpu()
    assert torch.equal(with_streams, plain)
    torch.testing.assert_close(with_streams, t.sin() * 2 + 1)


def with_an_event(x: torch.Tensor) -> torch.Tensor:
    event = torch.Event(device="ember")
    y = (x * 2).relu()
    event.record()
    event.wait()
    return y + 1


@pytest.mark.parametrize("backend", ["eager", "inductor"])
def test_an_event_traces_into_one_graph(backend: str) -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend(backend)
    x = sample(64).to(EMBER)
    result = torch.compile(with_an_event, backend=counter, fullgraph=True)(x)
    torch.testing.assert_close(result.cpu(), with_an_event(x).cpu())
    assert counter.frame_count == 1


def test_a_kernel_call_keeps_its_place_before_an_event() -> None:
    # The CPU's scheduling writes a kernel's call at its next flush; an event's record has no
    # device, so nothing flushed before it, and the call (and its input) came after the record.
    compiled = torch.compile(with_an_event, fullgraph=True)
    _, (wrapper, *_) = torch._inductor.utils.run_and_get_code(compiled, sample(64).to(EMBER))
    body = wrapper[wrapper.index("def call") :]
    assert body.index("cpp_fused") < body.index("record_event.default") < body.index("wait_event.default")


def test_the_cache_key_names_the_vector_isa(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch._inductor.cpu_vec_isa import pick_vec_isa
    from torch_ember.compiler.inductor import CodegenVersion

    version = CodegenVersion()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    scalar = version.uuid()
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")
    assert scalar.endswith("-INVALID_VEC_ISA")  # default: Inductor writes scalar C++, no at::vec
    if str(pick_vec_isa()) != "INVALID_VEC_ISA":  # this CPU vectorizes: the key tells them apart
        assert version.uuid() != scalar


def test_cpp_wrapper_equals_eager() -> None:
    def fn(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.ops.ember.custom_abs(torch.sin(x) * 3) + 1
        return y, y.sum(dim=0)

    check_compiled(fn, sample(6, 8), options={"cpp_wrapper": True})


def test_cpp_wrapper_calls_aten_operators_through_embers_shim() -> None:
    # The C++ wrapper calls an ATen operator it does not generate (mm) through a C shim:
    # ember's (csrc/aoti/EmberShim.cpp, test_ember_aoti.py). One it lacks is a clear error,
    # not C++ that fails to compile.
    x, w = sample(6, 8), sample(8, 5, seed=1)
    compiled = torch.compile(lambda x, w: torch.relu(x @ w) * 3, options={"cpp_wrapper": True})
    torch.testing.assert_close(compiled(x.to(EMBER), w.to(EMBER)).cpu(), torch.relu(x @ w) * 3)
    b = sample(2, 3, 4, seed=2).to(EMBER)
    x3, w3 = sample(2, 3, 5, seed=3).to(EMBER), sample(2, 5, 4, seed=4).to(EMBER)
    with pytest.raises(InductorError, match=r"ember's C shim has no aoti_torch_ember_baddbmm_out"):
        torch.compile(lambda b, x, w: torch.baddbmm(b, x, w), options={"cpp_wrapper": True})(b, x3, w3)


def test_dynamic_batch_sizes_compile_once() -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda x: torch.log_softmax(x * 2 + 1, dim=-1), backend=counter, dynamic=True)
    for batch in (2, 3, 5, 8, 13):
        x = sample(batch, 10, seed=batch)
        result = compiled(x.to(EMBER))
        assert result.shape == (batch, 10) and result.device == EMBER
        torch.testing.assert_close(result.cpu(), torch.log_softmax(x * 2 + 1, dim=-1))
    assert counter.frame_count == 1


def test_a_cpu_scalar_tensor_joins_an_ember_graph() -> None:
    # Eager PyTorch lets a 0-dim CPU tensor join any device's operator; so does a float argument
    # under dynamic=True, which Dynamo passes to the graph as a 0-dim CPU tensor.
    x = sample(6)
    result = torch.compile(lambda x, s: x * s + 1)(x.to(EMBER), torch.tensor(2.5))
    torch.testing.assert_close(result.cpu(), x * 2.5 + 1)
    scaled = torch.compile(lambda x, s: x * s, dynamic=True)
    for factor in (2.5, 3.5):
        torch.testing.assert_close(scaled(x.to(EMBER), factor).cpu(), x * factor)


def test_the_custom_op_runs_inside_a_compiled_graph() -> None:
    # ember::custom_abs has a Meta kernel: Dynamo traces it on fake tensors, no graph break.
    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.custom_abs(x * 2 - 1).sqrt() + 1

    check_compiled(fn, sample(7, 5), fullgraph=True)


def test_autocast_under_compile_runs_in_float16() -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.autocast("ember", dtype=torch.float16):
            return torch.relu(a @ b) + 1

    a, b = sample(8, 16).to(EMBER), sample(16, 4, seed=1).to(EMBER)
    got = torch.compile(fn, fullgraph=True)(a, b)
    assert got.dtype == torch.float16 and got.device == EMBER
    torch.testing.assert_close(got.cpu(), fn(a, b).cpu())
    # Against float32 on the CPU: float16 rounds the product and then the sum (up to two half-ulps).
    reference = torch.relu(a.cpu().half().float() @ b.cpu().half().float()) + 1
    torch.testing.assert_close(got.cpu().float(), reference, rtol=2e-3, atol=1e-3)


def test_changing_the_device_index_recompiles_once() -> None:
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(pointwise_chain, backend=counter)
    x = sample(64)
    for device, compiles in ((EMBER, 1), (EMBER_1, 2), (EMBER, 2), (EMBER_1, 2)):
        with LaunchCounter() as launches:
            result = compiled(x.to(device))
        assert result.device == device
        assert launches.devices[-1] == device.index  # the kernel ran on its buffers' device
        torch.testing.assert_close(result.cpu(), pointwise_chain(x))
        assert counter.frame_count == compiles


# -- Training -----------------------------------------------------------------------------------


def small_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def step(
    model: nn.Module, optimizer: torch.optim.Optimizer, inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """One training step: forward, cross entropy, backward, SGD with momentum, zero_grad."""
    loss = F.cross_entropy(model(inputs), targets)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss


def test_a_compiled_training_step_equals_eager() -> None:
    # Forward and backward compiled (Dynamo breaks the graph at backward()), the update too.
    torch.manual_seed(0)
    initial = small_cnn()
    inputs, targets = sample(4, 3, 8, 8), torch.tensor([0, 1, 2, 3])
    runs = {}
    for label, device, call in (
        ("compiled", EMBER, torch.compile(step)),
        ("eager", EMBER, step),
        ("cpu", torch.device("cpu"), step),
    ):
        model = copy.deepcopy(initial).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = [call(model, optimizer, inputs.to(device), targets.to(device)).item() for _ in range(2)]
        runs[label] = (losses, [p.detach().cpu() for p in model.parameters()])
    for label in ("eager", "cpu"):
        torch.testing.assert_close(runs["compiled"], runs[label])


# -- torch.export ---------------------------------------------------------------------------------


def test_export_round_trip_on_ember(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3)).to(EMBER)
    x = sample(5, 6).to(EMBER)
    program = torch.export.export(model, (x,))
    path = tmp_path / "model.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path)
    assert {p.device for p in loaded.state_dict.values()} == {EMBER}
    result = loaded.module()(x)
    assert result.device == EMBER
    torch.testing.assert_close(result.cpu(), model(x).cpu(), rtol=0, atol=0)


# -- Memory stays protected -----------------------------------------------------------------------

PROTECTED = textwrap.dedent(
    """
    import ctypes, sys
    import torch, torch_ember
    x = torch.arange(8.0, device="ember")
    out = torch.compile(lambda x: torch.exp(x * 0.5) + 1)(x)
    print("result", (out.cpu() - (torch.exp(torch.arange(8.0) * 0.5) + 1)).abs().max().item(), flush=True)
    print("read", ctypes.c_float.from_address(out.data_ptr()).value, flush=True)
    """
)


def test_device_memory_stays_unreadable_after_a_compiled_call() -> None:
    done = subprocess.run([sys.executable, "-c", PROTECTED], capture_output=True, text=True, timeout=120)
    assert "result 0.0" in done.stdout, done.stdout + done.stderr
    assert "read" not in done.stdout
    # The host's read faulted: the child died of SIGSEGV (-11).
    assert done.returncode == -signal.SIGSEGV, (done.returncode, done.stderr)


# -- Bad input --------------------------------------------------------------------------------------


def test_a_device_index_that_does_not_exist_is_a_clear_error() -> None:
    compiled = torch.compile(lambda x: (x * 2 + 1).to("ember:7"))
    with pytest.raises(RuntimeError, match=r"device index 7 is out of range: there are 2 ember devices"):
        compiled(torch.ones(3, device=EMBER))
    factory = torch.compile(lambda: torch.ones(3, device=torch.device("ember:7")) * 2)
    with pytest.raises(RuntimeError, match=r"device index 7 is out of range"):
        factory()


def test_two_ember_devices_in_one_graph_are_a_clear_error() -> None:
    compiled = torch.compile(lambda x, y: x * 2 + y)
    with pytest.raises(RuntimeError, match=r"found at least two devices, ember:0 and ember:1"):
        compiled(torch.ones(3, device=EMBER), torch.ones(3, device=EMBER_1))
    # The process goes on: the same function compiles for one device.
    result = compiled(torch.ones(3, device=EMBER_1), torch.ones(3, device=EMBER_1))
    torch.testing.assert_close(result.cpu(), torch.full((3,), 3.0))


def test_a_launcher_without_an_address_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    # Raised, not asserted: `python -O` must not hand generated kernels a null launcher.
    class Library:
        emberLaunchCompiled = ctypes.c_void_p(None)

    monkeypatch.setattr(ctypes, "CDLL", lambda path: Library())
    with pytest.raises(RuntimeError, match=r"^ember: emberLaunchCompiled in /lib/x\.so has no address$"):
        torch_ember.compiler.launcher_address("/lib/x.so")
