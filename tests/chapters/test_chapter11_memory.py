"""Chapter 11's last section: the caching allocator, checked on the backend the chapter ends with.

Chapter 01's `allocator` part is revised into a `c10::DeviceAllocator` over the device cache (`device_cache`),
with a fork guard (`fork_guard`); chapters before 09 keep chapter 01's version. The device module's "Memory"
section reads the cache's statistics through torch.accelerator.
"""

from __future__ import annotations

import gc
import multiprocessing
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch

from book.builds import builder
from book.run.chapter import Chapter

E = "privateuseone"
MiB = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    yield Chapter.of("device_guard").build()
    gc.collect()  # let the next module's build unload this one


@pytest.fixture
def ember(backend: builder.Build) -> Iterator[ModuleType]:
    module = torch.privateuseone
    gc.collect()
    module.synchronize()
    module.empty_cache()
    yield module
    module.synchronize()


def test_chapter_09_revises_chapter_01s_allocator_and_earlier_chapters_keep_the_old_one():
    (old,) = [p for p in Chapter.of("allocator").parts() if p.name == "allocator"]
    (new,) = [p for p in Chapter.of("device_guard").parts() if p.name == "allocator"]
    assert "c10::DeviceAllocator" in new.source and "c10::DeviceAllocator" not in old.source
    assert [p for p in Chapter.of("generator").parts_through() if p.name == "allocator"] == [old]
    assert [p for p in Chapter.of("device_guard").parts_through() if p.name == "allocator"] == [new]
    names = [p.name for p in Chapter.of("device_guard").parts_through()]
    assert {"device_cache", "fork_guard"} <= set(names)


def test_torch_accelerator_memory_functions_work_on_the_cache(ember: ModuleType):
    assert ember.get_allocator_backend() == "native"
    start = torch.accelerator.memory_allocated()
    x = torch.empty(1000, device=E)  # 4000 bytes, a 4096-byte block
    assert torch.accelerator.memory_allocated() == ember.memory_allocated() == start + 4096
    assert torch.accelerator.memory_reserved() >= 2 * MiB
    assert torch.accelerator.max_memory_allocated() >= start + 4096
    free, total = torch.accelerator.get_memory_info()
    assert total == 4 << 30 and 0 < free < total
    del x


def test_a_freed_block_is_cached_reused_and_returned_by_empty_cache(ember: ModuleType):
    reserved = ember.memory_reserved()
    calls = ember.driver_memory_stats().total_allocations
    x = torch.empty(3 * MiB, dtype=torch.uint8, device=E)
    address = x.data_ptr()
    del x
    assert ember.memory_reserved() == reserved + 4 * MiB
    y = torch.empty(3 * MiB, dtype=torch.uint8, device=E)
    assert y.data_ptr() == address
    assert ember.driver_memory_stats().total_allocations == calls + 1
    del y
    ember.empty_cache()
    assert ember.memory_reserved() == reserved


def test_record_stream_holds_a_block_back_until_the_other_stream_is_done(ember: ModuleType):
    n = 1 << 16
    side = ember.Stream()

    def copy_reads(record: bool) -> float:
        source = torch.full((n,), 3.0, device=E)
        copy = torch.empty(n, device=E)
        with ember.stream(side):
            ember._sleep(100_000)
            copy.copy_(source, non_blocking=True)
        if record:
            source.record_stream(side)
        del source
        reused = torch.full((n,), -1.0, device=E)
        side.synchronize()
        del reused
        return copy[0].item()

    assert copy_reads(record=False) == -1.0  # the race record_stream exists for
    assert copy_reads(record=True) == 3.0


def test_out_of_memory_is_a_torch_out_of_memory_error_and_the_process_recovers(ember: ModuleType):
    held = []
    with pytest.raises(torch.OutOfMemoryError) as caught:
        for _ in range(5):
            held.append(torch.empty(1 << 30, dtype=torch.uint8, device=f"{E}:1"))
    message = str(caught.value)
    assert message.startswith("ember out of memory. Tried to allocate 1.00 GiB. ember device 1")
    assert "total capacity of 4.00 GiB" in message and "EMBER_DEVICE_MEMORY_BYTES" in message
    assert ember.memory_stats(1)["num_ooms"] >= 1
    del held
    again = torch.empty(2 << 30, dtype=torch.uint8, device=f"{E}:1")
    assert again.device == torch.device(E, 1)
    del again
    ember.empty_cache()


def _use_ember(queue: multiprocessing.Queue) -> None:
    try:
        torch.ones(2, device=E)
        queue.put("used")
    except RuntimeError as error:
        queue.put(str(error))


def test_a_child_forked_after_use_is_refused_with_the_spawn_advice(ember: ModuleType):
    torch.ones(2, device=E)
    fork = multiprocessing.get_context("fork")
    queue = fork.Queue()
    child = fork.Process(target=_use_ember, args=(queue,))
    child.start()
    answer = queue.get(timeout=60)
    child.join(60)
    assert answer.startswith("Cannot re-initialize ember in forked subprocess")
    assert "'spawn' start method" in answer
    assert child.exitcode == 0
    assert not ember._is_in_bad_fork()


def test_a_rebuild_returns_the_cache_first(ember: ModuleType):
    # book.builds.builder refuses to retire a build while driver allocations made through it are alive; cached
    # segments are such allocations, so it empties the cache before it counts.
    x = torch.empty(3 * MiB, dtype=torch.uint8, device=E)
    del x
    cached, live = ember.memory_reserved(), builder.live_device_allocations()[0]
    builder._return_cached_memory()
    assert ember.memory_reserved() == cached - 4 * MiB
    assert builder.live_device_allocations()[0] == live - 1
