"""The driver's streams and sync events through torch_ember/driver.py's ctypes face (no PyTorch).

The C++ self-test (tests/package/driver) covers the semantics in depth; these tests check what
chapter 11 and the device module rely on from Python: argument types, bool queries, and errors
that name the stream, event or device.
"""

from __future__ import annotations

import ctypes
import time
from typing import Any

import pytest

from book.builds.driver import driver

H2D, D2H = 0, 1


@pytest.fixture(scope="module")
def drv() -> Any:
    return driver()


def test_a_sleep_returns_at_once_and_synchronize_waits(drv: Any) -> None:
    stream = drv.stream_create(0)
    start = time.perf_counter()
    drv.sleep(100_000, 0, stream)
    assert time.perf_counter() - start < 0.05
    assert not drv.stream_query(0, stream)
    assert drv.stream_query(0, 0)  # the default stream is not busy
    drv.stream_synchronize(0, stream)
    assert time.perf_counter() - start >= 0.099
    assert drv.stream_query(0, stream)


def test_events_time_a_sleep_and_order_streams(drv: Any) -> None:
    writer, reader = drv.stream_create(0), drv.stream_create(0)
    start, end = drv.event_create(0), drv.event_create(0)
    drv.event_record(start, 0, writer)
    drv.sleep(30_000, 0, writer)
    drv.event_record(end, 0, writer)
    assert not drv.event_query(end)
    drv.stream_wait_event(0, reader, end)
    drv.stream_synchronize(0, reader)  # waited for the writer's event
    assert drv.event_query(end)
    assert 29.0 <= drv.event_elapsed_time(start, end) < 10_000
    for event in (start, end):
        drv.event_destroy(event)


def test_async_copies_land_later_and_in_order(drv: Any) -> None:
    n = 4096
    device = ctypes.c_void_p()
    drv.check(drv.lib.emMalloc(ctypes.byref(device), n), "emMalloc")
    source = (ctypes.c_ubyte * n)(*([7] * n))
    back = (ctypes.c_ubyte * n)()
    stream = drv.stream_create(0)
    drv.sleep(50_000, 0, stream)
    drv.memcpy_async(device.value, ctypes.addressof(source), n, H2D, 0, stream)
    drv.memcpy_async(ctypes.addressof(back), device.value, n, D2H, 0, stream)
    assert back[0] == 0  # not there yet
    drv.synchronize(0)
    assert back[0] == 7 and back[n - 1] == 7
    drv.check(drv.lib.emFree(device), "emFree")


def test_the_current_stream_is_per_device(drv: Any) -> None:
    stream = drv.stream_create(1)
    assert drv.current_stream(1) == 0
    drv.set_stream(1, stream)
    try:
        assert drv.current_stream(1) == stream
        assert drv.current_stream(0) == 0
    finally:
        drv.set_stream(1, 0)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda d: d.stream_synchronize(0, 10**12), "stream 1000000000000 does not exist on ember device 0"),
        (lambda d: d.set_stream(0, d.stream_create(1)), "belongs to ember device 1, not device 0"),
        (lambda d: d.sleep(1, 2, 0), "device index 2 is out of range"),
        (lambda d: d.event_synchronize(d.event_create(0)), "has never been recorded"),
        (lambda d: d.event_query(10**12), "event 1000000000000 does not exist"),
        (lambda d: d.event_record(d.event_create(1), 0, 0), "belongs to ember device 1"),
    ],
)
def test_errors_name_what_is_wrong(drv: Any, call: Any, message: str) -> None:
    with pytest.raises(RuntimeError, match="ember driver error") as error:
        call(drv)
    assert message in str(error.value)


def test_elapsed_time_needs_timing(drv: Any) -> None:
    untimed, timed = drv.event_create(0, enable_timing=False), drv.event_create(0)
    drv.event_record(untimed, 0, 0)
    drv.event_record(timed, 0, 0)
    with pytest.raises(RuntimeError, match="emSyncEventDisableTiming"):
        drv.event_elapsed_time(untimed, timed)
