"""Streams, events, pinned memory and non_blocking copies of the installed torch_ember package (chapter 11).

`torch.ember` is the device module; `torch.Stream`, `torch.Event` and `torch.accelerator` reach ember's device
guard. Races are made deterministic with `torch.ember._sleep`: the side stream is busy for far longer than the
host needs to reach the read. Bad input (a stream or event of the wrong device, waiting on an event never
recorded, a bad device index) must be a clear error naming the device.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
import torch

SLEEP_US = 300_000


@pytest.fixture(autouse=True)
def _idle_default_streams() -> Iterator[None]:
    """Every test leaves every stream idle and the default streams current."""
    yield
    for index in range(torch.ember.device_count()):
        torch.ember.synchronize(index)
        torch.ember.set_stream(torch.ember.default_stream(index))
    torch.ember.set_device(0)


def test_the_guard_hands_out_pool_streams_and_exchanges_the_current_stream():
    ids = [torch.Stream("ember:1").stream_id for _ in range(8)]
    assert len(set(ids[:4])) == 4 and ids[4:] == ids[:4] and 0 not in ids
    side = torch.Stream("ember")
    assert side.device == torch.device("ember", 0)
    with side:
        assert torch.accelerator.current_stream() == side
    assert torch.accelerator.current_stream().stream_id == 0
    assert torch.accelerator.current_accelerator() == torch.device("ember")


def test_device_module_streams_and_events_subclass_torchs():
    stream, event = torch.ember.Stream(1), torch.ember.Event()
    assert isinstance(stream, torch.Stream) and isinstance(event, torch.Event)
    assert stream.device == torch.device("ember", 1)
    assert isinstance(stream.record_event(), torch.ember.Event)
    assert torch.ember.default_stream(1).stream_id == 0
    with torch.ember.stream(stream):
        assert torch.ember.current_device() == 1 and torch.ember.current_stream() == stream
    assert torch.ember.current_device() == 0 and torch.ember.current_stream(1).stream_id == 0


def test_events_query_synchronize_and_time_queued_work():
    side = torch.ember.Stream()
    start, end = torch.ember.Event(enable_timing=True), torch.ember.Event(enable_timing=True)
    start.record(side)
    with torch.ember.stream(side):
        torch.ember._sleep(50_000)
    end.record(side)
    assert not end.query() and not side.query()
    end.synchronize()
    assert end.query() and side.query()
    assert start.elapsed_time(end) >= 45.0


def test_torch_accelerator_synchronize_waits_for_every_stream():
    side = torch.ember.Stream()
    with torch.ember.stream(side):
        torch.ember._sleep(SLEEP_US)
    torch.accelerator.synchronize()
    assert side.query()


def test_a_race_is_lost_without_a_wait_and_won_with_wait_stream_or_an_event():
    n = 1 << 14
    host = torch.arange(n, dtype=torch.float32).pin_memory()
    x = torch.zeros(n, device="ember")
    side = torch.ember.Stream()

    def write() -> None:
        with torch.ember.stream(side):
            torch.ember._sleep(SLEEP_US)
            x.copy_(host, non_blocking=True)

    write()
    assert (x * 2).sum().item() == 0.0
    torch.ember.synchronize()
    for order in (lambda: torch.ember.current_stream().wait_stream(side), lambda: side.record_event().wait()):
        x.zero_()
        write()
        order()
        assert torch.equal((x * 2).cpu(), host * 2)


def test_pinned_memory_and_non_blocking_copies():
    n = 1 << 14
    pinned = torch.arange(n, dtype=torch.float32).pin_memory()
    assert pinned.is_pinned() and pinned[5:].is_pinned() and not torch.ones(2).is_pinned()
    x = torch.empty(n, device="ember")
    torch.ember._sleep(SLEEP_US)
    x.copy_(pinned, non_blocking=True)
    assert not torch.ember.current_stream().query()  # queued, the host went on
    del pinned  # freed while queued: the block outlives the copy
    gc.collect()
    back = x.to("cpu", non_blocking=True)
    assert back.is_pinned()
    torch.ember.synchronize()
    assert torch.equal(back, torch.arange(n, dtype=torch.float32))
    torch.ember._sleep(SLEEP_US)
    x.copy_(torch.zeros(n), non_blocking=True)  # pageable memory: synchronous, after the sleep
    assert torch.ember.current_stream().query()
    assert x.sum().item() == 0.0


def test_record_stream_runs_on_ember_and_refuses_a_non_ember_stream():
    n = 1 << 14
    source, copy = torch.full((n,), 3.0, device="ember"), torch.empty(n, device="ember")
    side = torch.ember.Stream()
    with torch.ember.stream(side):
        torch.ember._sleep(SLEEP_US)
        copy.copy_(source, non_blocking=True)
    source.record_stream(side)
    del source
    torch.full((n,), -1.0, device="ember")
    side.synchronize()
    assert torch.equal(copy.cpu(), torch.full((n,), 3.0))
    with pytest.raises(RuntimeError, match=r"a tensor on ember:0 can only be recorded on an ember stream"):
        copy.record_stream(torch.Stream("cpu"))


# ---- bad input: clear errors naming the device ---------------------------------------------------


def test_an_event_recorded_on_a_stream_of_another_device_names_both_devices():
    event = torch.ember.Stream(0).record_event()
    with pytest.raises(
        RuntimeError, match=r"an event of device ember:0 cannot be recorded on a stream of device ember:1"
    ):
        event.record(torch.ember.Stream(1))


def test_a_stream_id_of_another_device_names_the_devices():
    of_1 = torch.ember.Stream(1)
    posing = torch.ember.Stream(stream_id=of_1.stream_id, device_index=0, device_type=of_1.device_type)
    with pytest.raises(
        RuntimeError, match=rf"stream {of_1.stream_id} belongs to ember device 1, not device 0"
    ):
        torch.ember.set_stream(posing)
    with pytest.raises(RuntimeError, match="belongs to ember device 1"):
        posing.synchronize()


def test_waiting_on_an_event_never_recorded_is_an_error_naming_the_device():
    for action in (lambda e: e.wait(), lambda e: e.synchronize(), lambda e: e.wait(torch.ember.Stream())):
        with pytest.raises(RuntimeError, match=r"never recorded \(on ember\)"):
            action(torch.ember.Event())
    with pytest.raises(RuntimeError, match="both events must be recorded"):
        torch.ember.Event(enable_timing=True).elapsed_time(torch.ember.Event(enable_timing=True))


def test_elapsed_time_without_timing_or_across_devices_is_refused():
    start, end = torch.ember.Event(), torch.ember.Event()
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(RuntimeError, match="no timestamp"):
        start.elapsed_time(end)
    on_0, on_1 = torch.ember.Event(enable_timing=True), torch.ember.Event(enable_timing=True)
    on_0.record(torch.ember.Stream(0))
    on_1.record(torch.ember.Stream(1))
    on_1.synchronize()
    with pytest.raises(RuntimeError, match="device"):
        on_0.elapsed_time(on_1)


def test_a_bad_device_index_names_the_index():
    for action in (
        lambda: torch.Stream("ember:7"),
        lambda: torch.ember.current_stream(7),
        lambda: torch.ember.Stream(7),
    ):
        with pytest.raises(RuntimeError, match="7"):
            action()
