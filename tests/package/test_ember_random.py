"""torch_ember's generators and random kernels: seeding, state, devices, generator arguments, the
distributions' statistics, dropout, and the errors for bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

E, E1 = "ember:0", "ember:1"


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.cpu(), b.cpu())


# ---- seeding and state ----------------------------------------------------------------------------


def test_manual_seed_reproduces_and_seeds_both_devices() -> None:
    torch.manual_seed(3)
    first = [torch.randn(6, device=d) for d in (E, E1)]
    torch.manual_seed(3)
    second = [torch.randn(6, device=d) for d in (E, E1)]
    assert all(same(a, b) for a, b in zip(first, second, strict=True))
    assert torch.ember.initial_seed() == 3
    torch.ember.manual_seed(4)
    assert torch.ember.initial_seed() == 4
    assert torch.ember.default_generator(1).initial_seed() == 3


def test_seed_and_seed_all_choose_a_fresh_seed() -> None:
    torch.ember.seed()
    chosen = torch.ember.initial_seed()
    torch.ember.seed_all()
    seeds = {torch.ember.default_generator(i).initial_seed() for i in range(torch.ember.device_count())}
    assert len(seeds) == 1 and seeds != {chosen}


def test_rng_state_round_trip_single_and_all() -> None:
    torch.ember.manual_seed_all(11)
    state = torch.ember.get_rng_state(E1)
    assert state.dtype == torch.uint8 and state.device.type == "cpu" and state.numel() == 16
    expected = torch.rand(5, device=E1)
    torch.ember.set_rng_state(state, E1)
    assert same(torch.rand(5, device=E1), expected)
    states = torch.ember.get_rng_state_all()
    drawn = [torch.randint(0, 100, (5,), device=d) for d in (E, E1)]
    torch.ember.set_rng_state_all(states)
    assert all(same(torch.randint(0, 100, (5,), device=d), x) for d, x in zip((E, E1), drawn, strict=True))


def test_generator_state_clone_and_offset() -> None:
    g = torch.Generator(device=E).manual_seed(21)
    a = torch.rand(3, device=E, generator=g)
    assert g.get_offset() == 1
    g.set_offset(0)
    assert same(torch.rand(3, device=E, generator=g), a)
    copy = torch.Generator(device=E)
    copy.set_state(g.get_state())
    assert same(torch.rand(3, device=E, generator=copy), torch.rand(3, device=E, generator=g))


def test_devices_are_independent() -> None:
    torch.manual_seed(1)
    reference = torch.rand(8, device=E1)
    torch.manual_seed(1)
    torch.rand(1000, device=E)
    assert same(torch.rand(8, device=E1), reference)


# ---- state the ecosystem saves and restores (issue 26) ---------------------------------------------


def _dropout_block_grads(device: str, checkpointed: bool, use_reentrant: bool) -> list[torch.Tensor]:
    """Gradients of a Linear -> Dropout -> tanh block, plain or under activation checkpointing, and
    the draw that follows the backward (checkpointing must leave the generators where a plain run
    leaves them)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(16, 16, device=device)
    dropout = torch.nn.Dropout(0.5)

    def block(x: torch.Tensor) -> torch.Tensor:
        return dropout(linear(x)).tanh()

    x = torch.randn(8, 16, device=device, requires_grad=True)
    if checkpointed:
        y = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=use_reentrant)
    else:
        y = block(x)
    y.square().sum().backward()
    after = torch.rand(4, device=device)
    return [x.grad.cpu(), linear.weight.grad.cpu(), linear.bias.grad.cpu(), after.cpu()]


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpointed_dropout_block_has_the_plain_gradients_as_on_the_cpu(use_reentrant: bool) -> None:
    """torch.utils.checkpoint saves the device's generator states before the forward and restores
    them before recomputing it, if the device module says `_initialized`: then the recomputed
    dropout draws the forward's mask."""
    for device in ("cpu", E):
        plain = _dropout_block_grads(device, checkpointed=False, use_reentrant=use_reentrant)
        checkpointed = _dropout_block_grads(device, checkpointed=True, use_reentrant=use_reentrant)
        assert all(torch.equal(a, b) for a, b in zip(plain, checkpointed, strict=True)), device
    assert torch.ember._initialized is True  # what checkpoint asks torch.cuda


def test_fork_rng_over_every_device_restores_each_and_warns_as_for_cuda() -> None:
    torch.manual_seed(8)
    expected = [torch.rand(3, device=d) for d in (E, E1)]
    torch.manual_seed(8)
    with pytest.warns(UserWarning, match="EMBER reports that you have 2 available devices"):
        with torch.random.fork_rng(device_type="ember"):
            torch.rand(50, device=E), torch.rand(50, device=E1)
    assert all(same(torch.rand(3, device=d), x) for d, x in zip((E, E1), expected, strict=True))


def test_state_saved_in_one_process_gives_the_same_numbers_in_another(tmp_path: Path) -> None:
    """A generator's state outlives its process: a default generator's and a torch.Generator's, as
    the CPU's do (the state is the seed and the offset; the numbers are a function of both)."""
    torch.manual_seed(13)
    torch.rand(7, device=E)  # an offset that is not zero
    own = torch.Generator(device=E).manual_seed(14)
    torch.randn(3, device=E, generator=own)
    cpu = torch.Generator().manual_seed(15)
    torch.randn(3, generator=cpu)
    states = {"default": torch.ember.get_rng_state(), "own": own.get_state(), "cpu": cpu.get_state()}
    path = tmp_path / "states.pt"
    torch.save(states, path)
    here = {
        "default": torch.rand(5, device=E).cpu(),
        "own": torch.randn(5, device=E, generator=own).cpu(),
        "cpu": torch.randn(5, generator=cpu),
    }
    script = f"""
import torch, torch_ember
states = torch.load({str(path)!r})
torch.ember.set_rng_state(states["default"])
own = torch.Generator(device="ember:0")
own.set_state(states["own"])
cpu = torch.Generator()
cpu.set_state(states["cpu"])
torch.save({{"default": torch.rand(5, device="ember:0").cpu(),
            "own": torch.randn(5, device="ember:0", generator=own).cpu(),
            "cpu": torch.randn(5, generator=cpu)}}, {str(tmp_path / "there.pt")!r})
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    there = torch.load(tmp_path / "there.pt")
    assert all(torch.equal(here[name], there[name]) for name in ("default", "own", "cpu"))


# ---- bad input: clear errors ----------------------------------------------------------------------


@pytest.mark.parametrize("other", ["cpu", E1])
def test_a_generator_of_the_wrong_device_is_refused_naming_both_devices(
    other: str,
) -> None:
    generator = torch.Generator(device=other)
    with pytest.raises(
        RuntimeError,
        match=rf"uniform_ got a generator on {other}(:0)? for a tensor on ember:0",
    ):
        torch.rand(3, device=E, generator=generator)
    with pytest.raises(RuntimeError, match=r"randperm got a generator on .* for a tensor on ember:0"):
        torch.randperm(4, device=E, generator=generator)


def test_a_generator_for_a_missing_device_is_refused() -> None:
    with pytest.raises(RuntimeError, match="ember"):
        torch.Generator(device="ember:7")


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda t: t.uniform_(2, 1), "from <= to"),
        (lambda t: t.normal_(0, -1), "std >= 0.0"),
        (lambda t: t.exponential_(0), "lambd > 0.0"),
        (lambda t: t.bernoulli_(1.5), "0 <= p <= 1"),
        (
            lambda t: t.random_(5, 5),
            "random_ expects 'from' to be less than 'to', but got from=5 >= to=5",
        ),
    ],
)
def test_bad_arguments_are_refused(call, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RuntimeError, match=message):
        call(torch.empty(4, device=E))


@pytest.mark.parametrize(
    ("draw", "message"),
    [
        (
            lambda: torch.empty(3, dtype=torch.int32, device=E).uniform_(),
            "uniform_ is not implemented for Int",
        ),
        (
            lambda: torch.empty(3, dtype=torch.bool, device=E).normal_(),
            "normal_ is not implemented for Bool",
        ),
        (
            lambda: torch.empty(3, dtype=torch.int64, device=E).exponential_(),
            "exponential_ is not implemented",
        ),
        (
            lambda: torch.empty(3, dtype=torch.int16, device=E).cauchy_(),
            "cauchy_ is not implemented for Short",
        ),
        (
            lambda: torch.empty(3, dtype=torch.bool, device=E).geometric_(0.5),
            "geometric_ is not implemented",
        ),
        (
            lambda: torch.empty(3, dtype=torch.complex64, device=E).bernoulli_(0.5),
            "bernoulli_ is not implemented",
        ),
        (
            lambda: torch.empty(3, dtype=torch.uint8, device=E).random_(0, 300),
            "to - 1 is out of bounds for unsigned char",
        ),
        (
            lambda: torch.empty(3, dtype=torch.int8, device=E).random_(-200, 5),
            "from is out of bounds for signed char",
        ),
    ],
)
def test_a_dtype_the_cpu_refuses_is_refused_not_filled_with_truncated_draws(draw, message: str) -> None:  # noqa: ANN001
    with pytest.raises(RuntimeError, match=message):
        draw()


def test_random_ops_without_kernels_are_refused_by_the_fallback() -> None:
    with pytest.raises(
        RuntimeError,
        match="cannot fall back to the CPU because it draws random numbers",
    ):
        torch.poisson(torch.ones(3, device=E))


def test_bad_state_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"16 bytes .* got Float with 16 elements"):
        torch.ember.set_rng_state(torch.zeros(16))


# ---- statistics -----------------------------------------------------------------------------------

N = 400_000


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_uniform_and_normal_moments(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    u = torch.empty(N, dtype=dtype, device=E).uniform_(-2, 6).cpu().double()
    assert u.min() >= -2 and u.max() < 6
    assert abs(u.mean() - 2) < 0.03 and abs(u.var() - 64 / 12) < 0.05
    z = torch.empty(N, dtype=dtype, device=E).normal_(1.5, 3).cpu().double()
    assert abs(z.mean() - 1.5) < 0.03 and abs(z.var() - 9) < 0.1


def test_exponential_and_bernoulli() -> None:
    torch.manual_seed(0)
    x = torch.empty(N, device=E).exponential_(0.5).cpu().double()
    assert x.min() >= 0 and abs(x.mean() - 2) < 0.03
    assert abs(torch.empty(N, device=E).bernoulli_(0.2).mean().item() - 0.2) < 0.005
    p = torch.tensor([0.0, 1.0, 0.5], device=E).expand(N // 3, 3)
    b = torch.bernoulli(p).cpu()
    assert b[:, 0].sum() == 0 and b[:, 1].sum() == N // 3 and abs(b[:, 2].mean() - 0.5) < 0.01


def test_random_overloads_and_randint() -> None:
    torch.manual_seed(0)
    r = torch.randint(-5, 5, (N,), device=E).cpu()
    assert r.min() == -5 and r.max() == 4 and abs(r.double().mean() + 0.5) < 0.03
    to = torch.empty(N, dtype=torch.float64, device=E).random_(7).cpu()
    assert to.min() == 0 and to.max() == 6 and torch.all(to == to.round())
    full = torch.empty(N, device=E).random_().cpu()
    assert full.min() >= 0 and full.max() <= 2**24
    assert torch.empty(N, dtype=torch.int64, device=E).random_().cpu().min() >= 0


def test_randperm_is_a_permutation() -> None:
    torch.manual_seed(0)
    for n in (0, 1, 2, 1000):
        perm = torch.randperm(n, device=E)
        assert perm.dtype == torch.int64 and perm.device == torch.device(E)
        assert same(perm.sort().values, torch.arange(n))
    assert not same(torch.randperm(1000, device=E), torch.arange(1000))


def test_multinomial_with_and_without_replacement() -> None:
    torch.manual_seed(0)
    weights = torch.tensor([[1.0, 0.0, 3.0, 4.0], [0.0, 0.0, 1.0, 1.0]], device=E)
    draws = torch.multinomial(weights, 2).cpu()
    assert draws.shape == (2, 2)
    assert all(len(set(row.tolist())) == 2 for row in draws)
    assert set(draws[1].tolist()) == {2, 3}
    assert 1 not in draws[0].tolist()
    many = torch.multinomial(torch.tensor([1.0, 0.0, 3.0], device=E), N, replacement=True).cpu()
    counts = torch.bincount(many, minlength=3).double() / N
    assert counts[1] == 0 and abs(counts[2] - 0.75) < 0.01
    with pytest.raises(RuntimeError, match="cannot draw 3 samples from 2 categories of non-zero weight"):
        torch.multinomial(torch.tensor([1.0, 0.0, 1.0], device=E), 3)


def test_dropout_scales_and_backward_uses_the_mask() -> None:
    torch.manual_seed(0)
    x = torch.randn(N, device=E, requires_grad=True)
    y = F.dropout(x, 0.3)
    kept = (y != 0).cpu()
    assert abs(kept.double().mean() - 0.7) < 0.005
    assert torch.allclose(y.detach().cpu()[kept], x.detach().cpu()[kept] / 0.7)
    y.backward(torch.ones_like(y))
    expected = kept.double() / 0.7
    assert torch.allclose(x.grad.cpu().double(), expected)
    out, mask = torch.ops.aten.native_dropout(x.detach(), 0.5, False)
    assert same(out, x.detach()) and mask.cpu().all()
    assert same(F.dropout(x.detach(), 0.3, training=False), x.detach())


def test_module_initialization_and_fork_rng_use_ember_generators() -> None:
    torch.manual_seed(5)
    first = torch.nn.Linear(16, 8, device=E).weight.detach()
    torch.manual_seed(5)
    second = torch.nn.Linear(16, 8, device=E).weight.detach()
    assert same(first, second)
    bound = 1 / 16**0.5  # kaiming_uniform_ with a=sqrt(5): U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    assert first.abs().max().item() <= bound
    torch.manual_seed(6)
    expected = torch.rand(4, device=E)
    torch.manual_seed(6)
    with torch.random.fork_rng(devices=[0], device_type="ember"):
        torch.rand(100, device=E)
    assert same(torch.rand(4, device=E), expected)


# ---- ranges and dtypes as on the CPU (issue 14) ----------------------------------------------------


def test_randint_accepts_the_full_int64_range() -> None:
    """The CPU accepts [-2^63, 2^63 - 1); so does ember, and from=-2^63 without `to` is all 2^64 values."""
    low, high = -(2**63), 2**63 - 1
    torch.manual_seed(0)
    r = torch.randint(low, high, (N,), dtype=torch.int64, device=E).cpu()
    torch.randint(low, high, (4,), dtype=torch.int64)  # the CPU accepts it too
    assert (r < 0).any() and (r > 0).any() and r.max() < high
    assert abs((r < 0).double().mean().item() - 0.5) < 0.01  # both halves, evenly
    full = torch.empty(N, dtype=torch.int64, device=E).random_(low, None).cpu()
    assert (full < 0).any() and (full > 2**62).any()
    near_top = torch.randint(high - 3, high, (1000,), device=E).cpu()
    assert set(near_top.tolist()) == {high - 3, high - 2, high - 1}


def test_random_bounds_follow_the_cpu() -> None:
    """A float's bound beyond what it holds exactly warns, as on the CPU (it used to be refused)."""
    for device in ("cpu", E):
        with pytest.warns(UserWarning, match=r"to - 1 is out of bounds \[-\(2\^24\), 2\^24\]"):
            torch.empty(4, device=device).random_(0, 2**30)
    with pytest.raises(RuntimeError, match="from is out of bounds for int"):
        torch.empty(3, dtype=torch.int32, device=E).random_(-(2**40), 0)
    with pytest.raises(RuntimeError, match="random_ expects 'from' to be less than 'to'"):
        torch.empty(3, dtype=torch.int64, device=E).random_(2**62, -(2**63))


@pytest.mark.parametrize(
    "draw",
    [
        lambda d: torch.randn(N // 4, dtype=torch.complex32, device=d),
        lambda d: torch.rand(N // 4, dtype=torch.complex32, device=d),
        lambda d: torch.empty(N // 4, dtype=torch.complex32, device=d).uniform_(-1, 3),
        lambda d: torch.empty(N // 4, dtype=torch.complex32, device=d).normal_(2, 0.5),
    ],
    ids=["randn", "rand", "uniform_", "normal_"],
)
def test_complex32_draws_like_the_cpu(draw) -> None:  # noqa: ANN001
    """complex32 (float16 parts) draws as float16 does: each part from float32 draws, as on the CPU."""
    torch.manual_seed(0)
    cpu, ember = draw("cpu"), draw(E)
    assert ember.dtype == torch.complex32 and ember.device.type == "ember"
    parts_cpu, parts_ember = (
        torch.view_as_real(cpu).double(),
        torch.view_as_real(ember.cpu()).double(),
    )
    assert torch.allclose(parts_ember.mean(0), parts_cpu.mean(0), atol=0.02)
    assert torch.allclose(parts_ember.var(0), parts_cpu.var(0), rtol=0.03)


# ---- the unsigned dtypes beyond uint8, in the CPU's words (issue 26) ---------------------------------

UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
RANDOM_FROM = getattr(torch.ops.aten.random_, "from")  # random_(from, to=None): not reachable by keyword


# (draw, the range [low, high] it draws from where the CPU accepts it)
UNSIGNED_DRAWS = {
    "to": (lambda t: t.random_(10), (0, 9)),
    "from_to": (lambda t: t.random_(3, 10), (3, 9)),
    "to_2^16": (lambda t: t.random_(0, 2**16), (0, 2**16 - 1)),
    "to_2^40": (lambda t: t.random_(5, 2**40), (5, 2**40 - 1)),
    "to_int64_max": (lambda t: t.random_(0, 2**63 - 1), (0, 2**63 - 2)),
    "negative_from": (lambda t: t.random_(-1, 10), None),
    "from_only": (
        lambda t: RANDOM_FROM(t, 70_000, None),
        None,
    ),  # up to the dtype's maximum
    "all_64_bits": (lambda t: RANDOM_FROM(t, -(2**63), None), None),
    "no_bounds": (lambda t: t.random_(), None),
}


def _draw(draw, dtype: torch.dtype, device: str) -> torch.Tensor | tuple[str, str]:  # noqa: ANN001
    """The draw (as float64 on the CPU), or the error's type and first line."""
    try:
        return draw(torch.empty(20_000, dtype=dtype, device=device)).cpu().double()
    except (RuntimeError, NotImplementedError) as error:
        return type(error).__name__, str(error).splitlines()[0]


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
@pytest.mark.parametrize("name", UNSIGNED_DRAWS)
def test_unsigned_random_follows_the_cpu(dtype: torch.dtype, name: str) -> None:
    """Accepted where the CPU accepts it, drawing from the same range; else refused in its words."""
    draw, bounds = UNSIGNED_DRAWS[name]
    cpu, ember = _draw(draw, dtype, "cpu"), _draw(draw, dtype, E)
    if isinstance(cpu, tuple):
        # The CPU's NotImplementedError names its kernel ("random_kernel_cpu"), ember's the operator.
        kernel_named = cpu[0] == "NotImplementedError" and re.sub(r'^"\w+"', "", cpu[1]) in ember[1]
        assert ember[0] == cpu[0] and (ember[1] == cpu[1] or kernel_named), (ember, cpu)
        return
    assert isinstance(ember, torch.Tensor), ember
    low, high = bounds if bounds is not None else (70_000, torch.iinfo(dtype).max)
    for drawn in (cpu, ember):
        assert low <= drawn.min().item() and drawn.max().item() <= high
    if high - low < 100:
        assert set(ember.tolist()) == set(range(low, high + 1))
    else:  # 20 000 uniform draws reach both ends' last percent
        assert (
            ember.min().item() < low + (high - low) / 100 and ember.max().item() > high - (high - low) / 100
        )


def test_make_tensor_makes_every_unsigned_dtype_on_ember() -> None:
    """torch.testing.make_tensor draws integers with random_(low, high): uint64 used to be refused."""
    for dtype in UNSIGNED:
        t = torch.testing.make_tensor((64,), dtype=dtype, device=E, low=0, high=9)
        values = t.cpu().double()
        assert t.dtype == dtype and t.device.type == "ember"
        assert values.min() >= 0 and values.max() <= 9 and len(values.unique()) > 1


def test_unsigned_random_of_an_empty_tensor_is_a_no_op() -> None:
    for dtype in UNSIGNED:
        assert torch.empty(0, dtype=dtype, device=E).random_().numel() == 0
        torch.empty(0, dtype=dtype).random_()  # the CPU too
