"""Streams and events (the device_guard chapter): `torch.cuda.streams`' classes and `torch.cuda`'s
stream functions, over the device guard."""

from __future__ import annotations

from types import TracebackType

import torch

from .devices import DeviceLike, _device_index, _the_driver, current_device, set_device

__all__ = [
    "Event",
    "Stream",
    "StreamContext",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
]


# ember-book: begin streams
def _backend_device(index: int) -> torch.device:
    return torch.device(torch._C._get_privateuse1_backend_name(), index)


class Stream(torch.Stream):
    """An ember stream: an in-order queue of device work, run asynchronously to the
    host.

    `Stream(device)` hands out one of the device's pool streams (the guard's
    `getNewStream`). Everything else is `torch.Stream`'s, through the device guard:
    `query`, `synchronize`, `wait_event`, `wait_stream`, `record_event`, and
    `with stream:`. Like `torch.cuda.Stream`, it is a `torch.Stream`, so it goes
    wherever one is accepted (`torch.accelerator.set_stream`, `Tensor.record_stream`).
    """

    def __new__(
        cls,
        device: DeviceLike = None,
        priority: int = 0,
        **kwargs: int,
    ) -> Stream:
        if kwargs:  # Stream(stream_id=..., device_index=..., device_type=...)
            return super().__new__(cls, priority=priority, **kwargs)
        index = _device_index(device)
        return super().__new__(cls, _backend_device(index), priority=priority)

    @classmethod
    def _wrap(cls, stream: torch.Stream) -> Stream:
        """The same driver stream as an ember `Stream`."""
        return cls(
            stream_id=stream.stream_id,
            device_index=stream.device_index,
            device_type=stream.device_type,
        )

    def record_event(self, event: Event | None = None) -> Event:
        """Record `event` (a new one if None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def __repr__(self) -> str:
        return f"<{_backend_device(self.device_index)} stream {self.stream_id}>"


class Event(torch.Event):
    """A marker in a stream: it completes when the stream's work before it has run.

    Unlike `torch.Event`, waiting on an event that was never recorded is an error:
    PyTorch treats it as "nothing to wait for" (the wait returns at once), which hides a
    missing `record()`.
    """

    def __new__(
        cls,
        enable_timing: bool = False,
        blocking: bool = False,
        interprocess: bool = False,
    ) -> Event:
        backend = torch._C._get_privateuse1_backend_name()
        return super().__new__(
            cls,
            backend,
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )

    @property
    def recorded(self) -> bool:
        """Whether `record()` was called: the driver's event is created by the first
        record."""
        return self.event_id != 0

    def _check_recorded(self, what: str) -> None:
        if not self.recorded:
            raise RuntimeError(
                f"ember: cannot {what} an event that was never recorded "
                f"(on {self.device.type}); call event.record() on a stream first"
            )

    def record(self, stream: torch.Stream | None = None) -> None:
        """Record on `stream` (default: the current stream of the current device)."""
        super().record(current_stream() if stream is None else stream)

    def wait(self, stream: torch.Stream | None = None) -> None:
        """Make the later work of `stream` (default: the current stream) wait for this
        event."""
        self._check_recorded("wait on")
        super().wait(current_stream() if stream is None else stream)

    def synchronize(self) -> None:
        """Wait on the host until the event has completed."""
        self._check_recorded("synchronize")
        super().synchronize()

    def elapsed_time(self, end_event: torch.Event) -> float:
        """Milliseconds from this event to `end_event`, both recorded with
        `enable_timing=True` and completed.

        `torch.Event.elapsed_time` of PyTorch 2.13 accepts only an exact `torch.Event`
        as the other event (it compares the type, not `isinstance`), so the driver
        answers for two ember events.
        """
        other = end_event
        if not isinstance(other, torch.Event) or other.device.type != self.device.type:
            raise TypeError(f"expected an event of {self.device.type}, got {other!r}")
        if not (self.event_id and other.event_id):
            raise RuntimeError(
                "ember: both events must be recorded before calculating elapsed time",
            )
        return _the_driver().event_elapsed_time(self.event_id, other.event_id)

    def __repr__(self) -> str:
        where = f"{self.device}" if self.recorded else "not recorded"
        backend = torch._C._get_privateuse1_backend_name()
        return f"<{backend} event {self.event_id} ({where})>"


def current_stream(device: DeviceLike = None) -> Stream:
    """The calling thread's current stream on `device` (default: the current device)."""
    return Stream._wrap(torch.accelerator.current_stream(_device_index(device)))


def default_stream(device: DeviceLike = None) -> Stream:
    """The default stream of `device`: stream 0, where work goes unless another stream
    is made current."""
    # current_stream checks the index
    current = torch.accelerator.current_stream(_device_index(device))
    return Stream(
        stream_id=0,
        device_index=current.device_index,
        device_type=current.device_type,
    )


def set_stream(stream: torch.Stream) -> None:
    """Make `stream` the current stream of its device, and its device the current
    device (as `torch.cuda.set_stream` does)."""
    torch.accelerator.set_stream(stream)


class StreamContext:
    """Context manager: make `stream` current (and its device), restore both on exit.
    None does nothing."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream = stream
        self._previous_device = -1
        self._previous_stream: torch.Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self._previous_device = current_device()
            self._previous_stream = current_stream(self.stream.device_index)
            set_stream(self.stream)
        return self.stream

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._previous_stream is not None:
            set_stream(self._previous_stream)
            set_device(self._previous_device)
            self._previous_stream = None


def stream(stream: torch.Stream | None) -> StreamContext:
    """`with torch.<device>.stream(s):` runs the block's ember work on `s`."""
    return StreamContext(stream)


def _sleep(microseconds: int) -> None:
    """Keep the current stream of the current device busy for `microseconds` and return
    at once (like `torch.cuda._sleep`): later work on that stream waits. For tests and
    demonstrations."""
    driver = _the_driver()
    device = current_device()
    driver.sleep(microseconds, device, driver.current_stream(device))


# ember-book: end streams
