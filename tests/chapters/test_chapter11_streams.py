"""Chapter 11's claims: streams and events on ember, checked on the backend the chapter ends with.

The backend is chapter 11's last build: chapter 01's device guard revised with the stream and event methods,
the stream pool, `aten::record_stream`, the non_blocking `copy_` kernel and the pinned host allocator. The
device module is the package's own file (`torch.privateuseone` in the book), with its section "Chapter 11".
Races are made deterministic with `_sleep`: the side stream is busy for far longer than the host needs to reach
the read, so a missing wait loses every time.
"""

from __future__ import annotations

import gc
import statistics
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from book.builds import builder
from book.parts.cells import Session
from book.run.chapter import Chapter

E = "privateuseone"
SLEEP_US = 300_000  # a side stream's head start: far longer than any host step below, even on a busy machine


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    yield Chapter.of("device_guard").build()
    gc.collect()  # let the next module's build unload this one


@pytest.fixture(scope="module")
def ember(backend: builder.Build) -> ModuleType:
    return torch.privateuseone


@pytest.fixture(autouse=True)
def _device_0_default_stream(backend: builder.Build) -> Iterator[None]:
    """Every test starts on device 0 and its default stream, and leaves every stream idle."""
    torch.privateuseone.set_device(0)
    yield
    for index in range(torch.privateuseone.device_count()):
        torch.privateuseone.synchronize(index)
        torch.privateuseone.set_stream(torch.privateuseone.default_stream(index))
    torch.privateuseone.set_device(0)


# ---- the revision of chapter 01's part ------------------------------------------------------------


def test_chapter_09_revises_chapter_01s_device_guard_and_later_builds_hold_only_the_new_one():
    (old,) = [p for p in Chapter.of("allocator").parts() if p.name == "device_guard"]
    (new,) = [p for p in Chapter.of("device_guard").parts() if p.name == "device_guard"]
    assert "streamFromPool" in new.source and "streamFromPool" not in old.source
    assert [p for p in Chapter.of("generator").parts_through() if p.name == "device_guard"] == [old]
    assert [p for p in Chapter.of("device_guard").parts_through() if p.name == "device_guard"] == [new]
    # The new version takes the old one's place: right after EMBER_CHECK, before the allocator.
    names = [p.name for p in Chapter.of("device_guard").parts_through()]
    assert names.index("ember_check") < names.index("device_guard") < names.index("allocator")


def test_the_revision_cell_shows_the_diff_against_chapter_01():
    (old,) = [p for p in Chapter.of("allocator").parts() if p.name == "device_guard"]
    (new,) = [p for p in Chapter.of("device_guard").parts() if p.name == "device_guard"]
    session = Session()
    session.start(Chapter.of("device_guard").slug)
    session.stage("device_guard", old.source)
    revision = session.stage("device_guard", new.source)
    assert revision is not None and revision.previous == old and revision.version == 2
    assert (
        "+  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {"
        in revision.diff()
    )


# ---- torch.Stream, torch.Event, torch.accelerator -------------------------------------------------


def test_new_streams_come_from_a_pool_of_four_per_device():
    ids = [torch.Stream(f"{E}:1").stream_id for _ in range(8)]
    assert len(set(ids[:4])) == 4 and ids[4:] == ids[:4] and 0 not in ids
    assert all(torch.Stream(f"{E}:1").device == torch.device(E, 1) for _ in range(2))
    assert torch.Stream(E).device == torch.device(E, 0)  # no index: the current device


def test_current_stream_is_per_device_and_exchanged_by_with_and_set_stream():
    side = torch.Stream(E)
    assert torch.accelerator.current_stream().stream_id == 0
    with side:
        assert torch.accelerator.current_stream() == side
        assert torch.accelerator.current_stream(1).stream_id == 0  # device 1 keeps its own
    assert torch.accelerator.current_stream().stream_id == 0
    torch.accelerator.set_stream(side)
    assert torch.accelerator.current_stream(0) == side


def test_work_queued_on_a_stream_keeps_it_busy_until_synchronized(ember: ModuleType):
    side = ember.Stream()
    with ember.stream(side):
        ember._sleep(SLEEP_US)
    assert not side.query() and torch.accelerator.current_stream().query()
    side.synchronize()
    assert side.query()


def test_device_synchronize_waits_for_every_stream_of_the_device(ember: ModuleType):
    side = ember.Stream()
    with ember.stream(side):
        ember._sleep(SLEEP_US)
    torch.accelerator.synchronize()
    assert side.query()


def test_events_complete_when_their_stream_reaches_them(ember: ModuleType):
    side = ember.Stream()
    event = torch.Event(E)
    event.record(side)
    assert event.query()  # an idle stream reaches it at once
    with ember.stream(side):
        ember._sleep(SLEEP_US)
    event.record(side)
    assert not event.query()
    event.synchronize()
    assert event.query() and side.query()


def test_elapsed_time_between_timing_events_covers_the_work_between_them(ember: ModuleType):
    start, end = torch.Event(E, enable_timing=True), torch.Event(E, enable_timing=True)
    start.record()
    ember._sleep(50_000)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 45.0
    start, end = (
        ember.Event(enable_timing=True),
        ember.Event(enable_timing=True),
    )  # the subclass, by the driver
    start.record()
    ember._sleep(50_000)
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 45.0


def test_events_time_kernels_in_proportion_to_their_work_on_a_busy_machine_too(ember: ModuleType):
    """The chapter's timing claim, measured its way: the same work (2^28 multiply-adds) between each
    pair of events, both sizes alternated, medians, one host thread. A kernel runs on the calling thread,
    so a preempted 512 product would otherwise count the machine's load against the larger size."""

    def per_product_ms(a: torch.Tensor, count: int) -> float:
        start, end = ember.Event(enable_timing=True), ember.Event(enable_timing=True)
        start.record()
        for _ in range(count):
            a @ a
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / count

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        small, large = torch.randn(256, 256).to(E), torch.randn(512, 512).to(E)
        per_product_ms(small, 1), per_product_ms(large, 1)
        times: dict[int, list[float]] = {256: [], 512: []}
        for _ in range(11):
            times[256].append(per_product_ms(small, 16))
            times[512].append(per_product_ms(large, 2))
    finally:
        torch.set_num_threads(threads)
    ratio = statistics.median(times[512]) / statistics.median(times[256])
    assert 4 < ratio < 16, times


def test_a_race_between_streams_is_lost_without_a_wait_and_won_with_one(ember: ModuleType):
    n = 1 << 14
    host = torch.arange(n, dtype=torch.float32).pin_memory()
    x = torch.zeros(n, device=E)
    side = ember.Stream()

    def write() -> None:
        with ember.stream(side):
            ember._sleep(SLEEP_US)
            x.copy_(host, non_blocking=True)

    write()
    assert (x * 2).sum().item() == 0.0  # read before the copy ran: wrong data, deterministically
    ember.synchronize()
    for order in (lambda: ember.current_stream().wait_stream(side), lambda: side.record_event().wait()):
        x.zero_()
        write()
        order()
        assert torch.equal((x * 2).cpu(), host * 2)


# ---- pinned memory and non_blocking copies -------------------------------------------------------


def test_pinned_memory_is_recognized_also_inside_a_block():
    pinned = torch.arange(64, dtype=torch.float32).pin_memory()
    assert pinned.is_pinned() and pinned[10:].is_pinned()
    assert torch.empty(8, pin_memory=True).is_pinned()
    assert not torch.arange(64).is_pinned()
    assert torch.equal(pinned, torch.arange(64, dtype=torch.float32))


def test_non_blocking_from_pinned_memory_returns_before_the_device_and_from_pageable_memory_waits(
    ember: ModuleType,
):
    n = 1 << 14
    x = torch.empty(n, device=E)
    for source, asynchronous in ((torch.ones(n).pin_memory(), True), (torch.ones(n), False)):
        ember._sleep(SLEEP_US)
        x.copy_(source, non_blocking=True)
        # Queued: the stream still has the sleep and the copy. Synchronous: the copy waited for the sleep.
        assert ember.current_stream().query() is not asynchronous
        ember.synchronize()
        assert torch.equal(x.cpu(), source)


def test_a_non_blocking_copy_to_the_host_lands_in_pinned_memory_after_a_synchronize(ember: ModuleType):
    data = torch.arange(1 << 14, dtype=torch.float32, device=E)
    ember._sleep(SLEEP_US)
    result = data.to("cpu", non_blocking=True)
    assert result.is_pinned() and not ember.current_stream().query()
    ember.current_stream().synchronize()
    assert torch.equal(result, torch.arange(1 << 14, dtype=torch.float32))


def test_a_pinned_tensor_freed_while_its_copy_is_queued_still_delivers_its_data(ember: ModuleType):
    n = 1 << 14
    x = torch.empty(n, device=E)
    host = torch.full((n,), 7.0).pin_memory()
    ember._sleep(SLEEP_US)
    x.copy_(host, non_blocking=True)
    del host  # the deleter waits for the copy before it unmaps the block
    gc.collect()
    assert torch.equal(x.cpu(), torch.full((n,), 7.0))


def test_copies_the_driver_cannot_queue_stay_correct_with_non_blocking(ember: ModuleType):
    source = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    on_device = source.to(E, non_blocking=True)  # pageable memory: synchronous
    copies = {
        "not dense": (on_device[:, ::2].to("cpu", non_blocking=True), source[:, ::2]),
        "transposed (dense: queued)": (on_device.t().to("cpu", non_blocking=True), source.t()),
        "dtype change": (on_device.to(torch.float64, non_blocking=True), source.double()),
        "across devices": (on_device.to(f"{E}:1", non_blocking=True), source),
    }
    torch.accelerator.synchronize()  # the host reads only after synchronizing
    for what, (copy, expected) in copies.items():
        assert torch.equal(copy.cpu(), expected), what


# ---- record_stream ----------------------------------------------------------------------------------


def test_record_stream_has_an_ember_kernel_and_memory_used_across_streams_stays_valid(ember: ModuleType):
    assert torch._C._dispatch_has_kernel_for_dispatch_key("aten::record_stream", "PrivateUse1")
    n = 1 << 14
    source, copy = torch.full((n,), 3.0, device=E), torch.empty(n, device=E)
    side = ember.Stream()
    with ember.stream(side):
        ember._sleep(SLEEP_US)
        copy.copy_(source, non_blocking=True)
    source.record_stream(side)
    del source
    torch.full((n,), -1.0, device=E)  # new memory, written while the copy is queued
    side.synchronize()
    assert torch.equal(copy.cpu(), torch.full((n,), 3.0))


def test_record_stream_on_a_stream_of_another_device_type_names_both():
    x = torch.ones(2, device=E)
    with pytest.raises(
        RuntimeError, match=r"a tensor on privateuseone:0 can only be recorded on an ember stream"
    ):
        x.record_stream(torch.Stream("cpu"))


# ---- the device module, and clear errors -------------------------------------------------------------


def test_the_device_module_streams_and_events_are_torch_streams_and_events(ember: ModuleType):
    stream, event = ember.Stream(1), ember.Event()
    assert isinstance(stream, torch.Stream) and isinstance(event, torch.Event)
    assert stream.device == torch.device(E, 1)
    assert ember.default_stream(1).stream_id == 0 and ember.default_stream(1).device_index == 1
    assert isinstance(stream.record_event(), ember.Event)
    assert {"Stream", "Event", "stream", "current_stream", "default_stream", "set_stream"} <= set(
        ember.__all__
    )


def test_the_stream_context_restores_the_stream_and_the_device(ember: ModuleType):
    on_1 = ember.Stream(1)
    with ember.stream(on_1):
        assert ember.current_device() == 1 and ember.current_stream() == on_1
    assert ember.current_device() == 0 and ember.current_stream(1).stream_id == 0
    with ember.stream(None):
        assert ember.current_stream().stream_id == 0


def test_waiting_on_an_event_never_recorded_is_an_error_in_ember_and_a_no_op_in_pytorch(ember: ModuleType):
    torch.Event(E).wait()  # PyTorch's rule: nothing to wait for
    for action in (lambda e: e.wait(), lambda e: e.synchronize()):
        with pytest.raises(RuntimeError, match=r"never recorded \(on privateuseone\)"):
            action(ember.Event())
    with pytest.raises(RuntimeError, match="both events must be recorded"):
        ember.Event(enable_timing=True).elapsed_time(ember.Event(enable_timing=True))


def test_an_event_of_one_device_recorded_on_another_devices_stream_names_both(ember: ModuleType):
    event = ember.Stream(0).record_event()
    with pytest.raises(
        RuntimeError,
        match=r"an event of device privateuseone:0 cannot be recorded on a stream "
        r"of device privateuseone:1",
    ):
        event.record(ember.Stream(1))
    with pytest.raises(RuntimeError, match=r"an event of device privateuseone:0 .* privateuseone:1"):
        event_plain = torch.Event(E)
        event_plain.record(torch.Stream(f"{E}:0"))
        event_plain.record(torch.Stream(f"{E}:1"))


def test_a_stream_of_another_device_or_an_unknown_stream_is_refused_by_the_driver(ember: ModuleType):
    of_device_1 = ember.Stream(1)
    posing = ember.Stream(
        stream_id=of_device_1.stream_id, device_index=0, device_type=of_device_1.device_type
    )
    with pytest.raises(
        RuntimeError, match=rf"stream {of_device_1.stream_id} belongs to ember device 1, not device 0"
    ):
        ember.set_stream(posing)
    unknown = ember.Stream(stream_id=1 << 40, device_index=0, device_type=of_device_1.device_type)
    with pytest.raises(RuntimeError, match="does not exist"):
        unknown.query()


def test_a_bad_device_index_names_the_index(ember: ModuleType):
    with pytest.raises(RuntimeError, match="7"):
        torch.Stream(f"{E}:7")
    with pytest.raises(RuntimeError, match="7"):
        ember.current_stream(7)


def test_timing_needs_timing_events(ember: ModuleType):
    start, end = ember.Event(), ember.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(RuntimeError, match="no timestamp"):
        start.elapsed_time(end)
    with pytest.raises(ValueError, match="enable_timing=True"):
        plain_start, plain_end = torch.Event(E), torch.Event(E)
        plain_start.record()
        plain_end.record()
        plain_start.elapsed_time(plain_end)


def test_the_sleep_exercise_queues_busy_work_on_the_current_stream(ember: ModuleType):
    parts = Chapter.of("device_guard").parts_through() + [
        Chapter.of("device_guard").exercises()["exercise_sleep_op"]
    ]
    builder.build(parts=parts, chapter=Chapter.of("device_guard").slug)
    try:
        torch.ops.ember.sleep(SLEEP_US)
        assert not torch.accelerator.current_stream().query()
        with pytest.raises(RuntimeError, match="expected a duration >= 0"):
            torch.ops.ember.sleep(-1)
    finally:
        torch.accelerator.synchronize()
        Chapter.of("device_guard").build()


def test_backward_runs_each_node_on_the_stream_its_forward_used(ember: ModuleType):
    weight, inputs = torch.randn(8, 8, dtype=torch.float64), torch.randn(4, 8, dtype=torch.float64)
    on_ember, side, seen = weight.to(E).requires_grad_(), ember.Stream(), []
    with ember.stream(side):
        hidden = inputs.to(E) @ on_ember
    hidden.register_hook(lambda grad: seen.append(torch.accelerator.current_stream()))
    hidden.tanh().sum().backward()
    assert seen == [side]
    on_cpu = weight.clone().requires_grad_()
    (inputs @ on_cpu).tanh().sum().backward()
    assert torch.allclose(on_ember.grad.cpu(), on_cpu.grad)
