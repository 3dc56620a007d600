"""Chapter 10: ember's generator (seeding, state, devices, generator arguments) and random kernels, as the
chapter's last build holds them, with the device module the chapters register."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
import torch

from book.builds import builder
from book.run.chapter import Chapter

E = "privateuseone"
E1 = f"{E}:1"


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    chapter = Chapter.of("generator")
    chapter.replay_earlier({})  # the device module (chapter 01) and the backend's name (chapter 08)
    yield chapter.build()
    gc.collect()  # let the next module's build unload this one


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.cpu(), b.cpu())


def test_torch_manual_seed_seeds_every_ember_device() -> None:
    torch.manual_seed(8)
    first = [torch.rand(5, device=device) for device in (E, E1)]
    torch.manual_seed(8)
    second = [torch.rand(5, device=device) for device in (E, E1)]
    assert all(same(a, b) for a, b in zip(first, second, strict=True))
    assert same(first[0], first[1])  # the same seed and offset on both devices
    assert [torch.privateuseone.default_generator(i).initial_seed() for i in range(2)] == [8, 8]
    torch.manual_seed(9)
    assert not same(torch.rand(5, device=E), first[0])


def test_saved_state_restores_the_stream_and_is_seed_and_offset() -> None:
    dm = torch.privateuseone
    dm.manual_seed(123)
    torch.randn(7, device=E)
    state = dm.get_rng_state()
    assert state.dtype == torch.uint8 and state.shape == (16,)
    assert int.from_bytes(bytes(state[:8].tolist()), "little") == 123
    assert int.from_bytes(bytes(state[8:].tolist()), "little") == 1
    expected = [torch.randn(3, device=E) for _ in range(2)]
    dm.set_rng_state(state)
    assert all(same(torch.randn(3, device=E), e) for e in expected)
    states = dm.get_rng_state_all()
    drawn = [torch.rand(2, device=d) for d in (E, E1)]
    dm.set_rng_state_all(states)
    assert all(same(torch.rand(2, device=d), x) for d, x in zip((E, E1), drawn, strict=True))


def test_a_bad_state_is_refused_naming_the_device_and_format() -> None:
    with pytest.raises(
        RuntimeError, match=r"privateuseone:0 is a contiguous CPU uint8 tensor of 16 bytes.*Byte"
    ):
        torch.privateuseone.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(ValueError, match="expected 2 generator states"):
        torch.privateuseone.set_rng_state_all([torch.privateuseone.get_rng_state()])


def test_devices_are_independent() -> None:
    torch.manual_seed(5)
    reference = torch.rand(4, device=E1)
    torch.manual_seed(5)
    for _ in range(3):
        torch.rand(100, device=E)
    assert same(torch.rand(4, device=E1), reference)
    dm = torch.privateuseone
    dm.manual_seed(6)  # the current device only
    assert [dm.default_generator(i).initial_seed() for i in range(2)] == [6, 5]


def test_a_generator_argument_is_honoured_and_leaves_the_default_alone() -> None:
    torch.manual_seed(8)
    reference = torch.rand(4, device=E)
    default = torch.privateuseone.default_generator()
    offset = default.get_offset()
    g = torch.Generator(device=E).manual_seed(8)
    assert same(torch.rand(4, device=E, generator=g), reference)
    assert default.get_offset() == offset
    assert g.get_offset() == 1
    g1 = torch.Generator(device=E1).manual_seed(8)
    assert same(torch.rand(4, device=E1, generator=g1), reference)


@pytest.mark.parametrize("other", ["cpu", E1])
def test_a_generator_of_another_device_is_refused_naming_both(other: str) -> None:
    with pytest.raises(
        RuntimeError, match=rf"got a generator on {other}(:0)? for a tensor on privateuseone:0"
    ):
        torch.randn(4, device=E, generator=torch.Generator(device=other))


def test_numbers_do_not_depend_on_threads_or_strides() -> None:
    threads = torch.get_num_threads()
    results = []
    try:
        for count in (1, 2):
            torch.set_num_threads(count)
            torch.manual_seed(1)
            results.append(torch.rand(70_000, device=E))
    finally:
        torch.set_num_threads(threads)
    assert same(*results)
    torch.manual_seed(2)
    strided = torch.empty(30, 40, device=E).t().normal_()
    torch.manual_seed(2)
    assert same(strided, torch.empty(40, 30, device=E).normal_())


def test_distributions_and_dropout() -> None:
    torch.manual_seed(0)
    n = 200_000
    assert abs(float(torch.randn(n, device=E).mean().cpu())) < 0.02
    assert abs(float(torch.empty(n, device=E).exponential_(2).mean().cpu()) - 0.5) < 0.01
    ints = torch.randint(-3, 4, (n,), device=E).cpu()
    assert ints.min() == -3 and ints.max() == 3
    assert same(torch.randperm(50, device=E).sort().values, torch.arange(50))
    # The kernels themselves, not the autograd engine: a test process may have started the engine (any
    # backward) before PrivateUse1 became the accelerator, and the engine sizes its device queues once.
    # Chapter 10's notebook runs dropout's backward through the engine.
    x = torch.ones(1000, device=E)
    y, mask = torch.ops.aten.native_dropout(x, 0.25, True)
    kept = y.cpu() != 0
    assert torch.equal(kept, mask.cpu())
    assert torch.all(y.cpu()[kept] == 1 / 0.75)
    grad = torch.ops.aten.native_dropout_backward(torch.ones(1000, device=E), mask, 1 / 0.75)
    assert same(grad, y)


def test_random_ops_without_a_kernel_are_still_refused() -> None:
    with pytest.raises(
        RuntimeError, match="geometric_ has no ember kernel and cannot fall back to the CPU because it draws"
    ):
        torch.empty(3, device=E).geometric_(0.5)


def test_register_generator_privateuse1_warns_and_refuses_a_second_registration() -> None:
    code = textwrap.dedent("""
        import ctypes, os, torch
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        register = lib["_ZN2at18_GeneratorRegisterC1ERKSt8functionIFNS_9GeneratorEaEE"]
        obj, fn = ctypes.create_string_buffer(8), ctypes.create_string_buffer(32)
        register(obj, fn); print("first", flush=True)
        register(obj, fn); print("second", flush=True)
    """)
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert child.stdout == "first\n"
    assert child.returncode < 0  # std::terminate: SIGABRT
    assert "REGISTER_GENERATOR_PRIVATEUSE1 is deprecated" in child.stderr
    assert "Only can register a generator to the PrivateUse1 dispatch key once!" in child.stderr


def test_module_initialization_and_fork_rng_use_ember_generators() -> None:
    torch.manual_seed(5)
    first = torch.nn.Linear(16, 8, device=E).weight.detach()
    torch.manual_seed(5)
    assert same(torch.nn.Linear(16, 8, device=E).weight.detach(), first)
    torch.manual_seed(6)
    expected = torch.rand(4, device=E)
    torch.manual_seed(6)
    with torch.random.fork_rng(devices=[0], device_type=E):
        torch.rand(100, device=E)
    assert same(torch.rand(4, device=E), expected)
