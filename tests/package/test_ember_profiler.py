"""ember in torch.profiler: device activities from the Kineto profiler (EmberProfiler.cpp)
and device time from the legacy profiler's stubs (EmberProfilerStubs.cpp)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch_ember  # noqa: F401
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

BOTH = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]


def profiled(work: Callable[[], object], activities: list[ProfilerActivity] = BOTH) -> profile:
    with profile(activities=activities) as prof:
        work()
    return prof


def device_events(prof: profile) -> list[Any]:
    return [e for e in prof.events() if e.device_type == DeviceType.PrivateUse1]


def chrome_trace(prof: profile, tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events: list[dict[str, Any]] = json.loads(path.read_text())["traceEvents"]
    return events


def of_category(trace: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    return [e for e in trace if e.get("cat") == category]


def test_matrix_product_has_device_time_and_its_kernel() -> None:
    a = torch.randn(64, 64, device="ember")
    b = torch.randn(64, 64, device="ember")
    prof = profiled(lambda: a @ b)
    mm = [e for e in prof.key_averages() if e.key == "aten::mm"]
    assert mm and mm[0].device_time_total > 0
    kernels = [e for e in device_events(prof) if e.name == "ember_mm"]
    assert len(kernels) == 1 and kernels[0].device_index == 0
    assert kernels[0].time_range.elapsed_us() > 0
    # The kernel is attached to the operator that launched it.
    owners = [e for e in prof.events() if e.name == "aten::mm" and e.kernels]
    assert [k.name for k in owners[0].kernels] == ["ember_mm"]


def test_copies_appear_as_memcpy_activities(tmp_path: Path) -> None:
    host = torch.arange(1024, dtype=torch.float32)

    def work() -> None:
        on_device = host.to("ember")
        assert torch.equal(on_device.cpu(), host)

    prof = profiled(work)
    names = [e.name for e in device_events(prof)]
    assert "Memcpy HtoD (Host -> ember)" in names
    assert "Memcpy DtoH (ember -> Host)" in names
    copies = of_category(chrome_trace(prof, tmp_path), "gpu_memcpy")
    assert sorted(c["args"]["bytes"] for c in copies) == [4096, 4096]


def test_each_device_activity_is_linked_to_its_operator(tmp_path: Path) -> None:
    a = torch.randn(32, 32, device="ember")
    prof = profiled(lambda: (a @ a).cpu())
    trace = chrome_trace(prof, tmp_path)
    ops = {e["args"]["External id"]: e["name"] for e in of_category(trace, "cpu_op")}
    device = of_category(trace, "kernel") + of_category(trace, "gpu_memcpy")
    assert len(device) == 2
    linked = {e["name"]: ops[e["args"]["External id"]] for e in device}
    assert linked == {
        "ember_mm": "aten::mm",
        "Memcpy DtoH (ember -> Host)": "aten::_copy_from",
    }


def test_flow_arrows_join_each_launch_to_its_kernel(tmp_path: Path) -> None:
    a = torch.randn(16, 16, device="ember")
    trace = chrome_trace(profiled(lambda: a + a), tmp_path)
    launches = of_category(trace, "privateuse1_runtime")
    kernels = of_category(trace, "kernel")
    assert [k["name"] for k in kernels] == ["ember_add"]
    assert [x["name"] for x in launches] == ["emLaunchKernel"]
    starts = [f for f in of_category(trace, "ac2g") if f["ph"] == "s"]
    ends = [f for f in of_category(trace, "ac2g") if f["ph"] == "f"]
    assert len(starts) == len(ends) == 1 and starts[0]["id"] == ends[0]["id"]
    assert (starts[0]["tid"], starts[0]["ts"]) == (
        launches[0]["tid"],
        launches[0]["ts"],
    )
    assert (ends[0]["pid"], ends[0]["tid"], ends[0]["ts"]) == (
        kernels[0]["pid"],
        kernels[0]["tid"],
        kernels[0]["ts"],
    )
    # The launch is on the host (the calling thread); its kernel starts inside it.
    assert launches[0]["ts"] <= kernels[0]["ts"] <= launches[0]["ts"] + launches[0]["dur"]


def test_two_streams_give_two_tracks(tmp_path: Path) -> None:
    a = torch.randn(32, 32, device="ember")
    side = torch.ember.Stream()

    def work() -> None:
        a.mul(2)
        with torch.ember.stream(side):
            a.mul(3)
        torch.ember.synchronize()

    trace = chrome_trace(profiled(work), tmp_path)
    tracks = {(k["pid"], k["tid"]) for k in of_category(trace, "kernel")}
    assert tracks == {(0, 0), (0, side.stream_id)}
    named = {e["args"]["name"] for e in trace if e.get("name") == "thread_name" and e["pid"] == 0}
    assert {"ember stream 0", f"ember stream {side.stream_id}"} <= named


def test_an_asynchronous_copy_is_timed_on_its_stream() -> None:
    host = torch.randn(256).pin_memory()  # pinned: the copy is queued, not done at once
    side = torch.ember.Stream()

    def work() -> None:
        with torch.ember.stream(side):
            on_device = host.to("ember", non_blocking=True)
        side.synchronize()
        assert torch.equal(on_device.cpu(), host)

    prof = profiled(work)
    copies = [e for e in device_events(prof) if e.name.startswith("Memcpy HtoD")]
    assert len(copies) == 1 and copies[0].time_range.elapsed_us() >= 0


def test_a_sleep_and_an_event_record_are_on_their_stream(tmp_path: Path) -> None:
    side = torch.ember.Stream()
    a = torch.randn(16, 16, device="ember")

    def work() -> None:
        with torch.ember.stream(side):
            torch.ember._sleep(3000)
            done = torch.ember.Event()
            done.record()
        torch.ember.current_stream().wait_event(done)
        a.mul(2)  # on the default stream, after the side stream's sleep
        torch.ember.synchronize()

    trace = chrome_trace(profiled(work), tmp_path)
    sleep = [k for k in of_category(trace, "kernel") if k["name"] == "ember_sleep"]
    assert len(sleep) == 1 and sleep[0]["tid"] == side.stream_id and sleep[0]["dur"] >= 3000
    records = of_category(trace, "cuda_sync")
    assert [(r["name"], r["tid"]) for r in records] == [("Event Record (ember)", side.stream_id)]
    (mul,) = [k for k in of_category(trace, "kernel") if k["name"] == "ember_mul"]
    assert records[0]["ts"] >= sleep[0]["ts"] + sleep[0]["dur"] - 1  # reached after the sleep
    assert mul["ts"] >= records[0]["ts"] and mul["tid"] == 0


def test_the_second_device_has_its_own_events(tmp_path: Path) -> None:
    a = torch.randn(16, 16, device="ember:1")
    prof = profiled(lambda: a @ a)
    kernels = [e for e in device_events(prof) if e.name == "ember_mm"]
    assert [k.device_index for k in kernels] == [1]
    trace = chrome_trace(prof, tmp_path)
    assert [k["pid"] for k in of_category(trace, "kernel")] == [1]
    labels = {e["pid"]: e["args"]["labels"] for e in trace if e.get("name") == "process_labels"}
    assert labels[1] == "ember 1"


def test_cpu_activity_alone_records_no_device_events() -> None:
    a = torch.randn(16, 16, device="ember")
    prof = profiled(lambda: (a @ a).cpu(), activities=[ProfilerActivity.CPU])
    assert device_events(prof) == []
    assert any(e.name == "aten::mm" for e in prof.events())


def test_profiling_nothing_works() -> None:
    prof = profiled(lambda: None)
    assert device_events(prof) == []
    assert prof.key_averages().table() is not None


def test_a_kernel_that_raises_reaches_the_caller_and_profiling_goes_on() -> None:
    logits = torch.randn(2, 3, device="ember")
    bad = torch.tensor([0, 7], device="ember")
    a = torch.randn(16, 16, device="ember")
    with profile(activities=BOTH) as prof:
        with pytest.raises(IndexError, match="Target 7 is out of bounds"):
            torch.nn.functional.nll_loss(logits, bad)
        product = a @ a
    assert [e.name for e in device_events(prof) if e.name == "ember_mm"] == ["ember_mm"]
    prof = profiled(lambda: a @ a)
    assert [e.name for e in device_events(prof)] == ["ember_mm"]
    torch.testing.assert_close(product.cpu(), a.cpu() @ a.cpu())


def test_a_compiled_kernel_appears_under_its_generated_name() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x + 1) * x.sin()

    compiled = torch.compile(fn)
    x = torch.randn(64, device="ember")
    compiled(x)  # compiles outside the profile
    with profile(activities=BOTH) as prof:
        out = compiled(x)
    torch.testing.assert_close(out.cpu(), fn(x.cpu()))
    names = [e.name for e in device_events(prof)]
    assert names and all(n.startswith("cpp_fused_") for n in names), names


def test_a_graph_replay_shows_its_kernels_under_their_names(tmp_path: Path) -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return (x + 1) * x.sin()

    compiled = torch.compile(fn)
    x = torch.randn(64, device="ember")
    compiled(x)  # compiles outside the capture
    graph = torch.accelerator.Graph()
    with torch.ember.stream(torch.ember.Stream()), graph:
        out = compiled(x)
    with profile(activities=BOTH) as prof:
        graph.replay()
        torch.ember.synchronize()
    torch.testing.assert_close(out.cpu(), fn(x.cpu()))
    trace = chrome_trace(prof, tmp_path)
    kernels = of_category(trace, "kernel")
    assert kernels and all(k["name"].startswith("cpp_fused_") for k in kernels)
    # One host call replays them all.
    assert [r["name"] for r in of_category(trace, "privateuse1_runtime")] == ["emGraphLaunch"]


def test_legacy_profiler_times_operators_with_ember_events() -> None:
    a = torch.randn(64, 64, device="ember")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "PrivateUse1 used in profiler but not enabled"
        with torch.autograd.profiler.profile(use_device="ember") as prof:
            with torch.autograd.profiler.record_function("wait"):
                torch.ember._sleep(20_000)  # the device is busy 20 ms, the host is not
            a @ a
    times = {e.key: e.device_time_total for e in prof.key_averages()}
    # A pair of ember events around each range: the device's time, in microseconds.
    assert times["wait"] >= 20_000
    assert times["aten::mm"] > 0
