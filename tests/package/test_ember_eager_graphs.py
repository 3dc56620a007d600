"""Graphs of eager code on the installed torch_ember, with CUDA's semantics: ember's kernels, copies between
device buffers and copies from pinned host memory are recorded while a stream captures, a replay equals running
the code again eagerly, and what cannot be captured (a synchronize, a host read of a device value, a copy to
pageable host memory, an operator whose result's size depends on values) is an error in CUDA's
words naming the operator, which invalidates the capture. Operators computed by the CPU's kernel on the device's
memory (the host kernel's functional operators, and the CPU fallback's while a stream captures) are recorded
with their results allocated from the meta kernel's sizes and strides. Random kernels are recorded with CUDA's
semantics for random numbers: each replay draws from the default generator where the same eager calls would."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest
import torch
import torch_ember  # noqa: F401
from torch import nn


def capture(work: Callable[[], object], **graph_args: object) -> tuple[torch.accelerator.Graph, object]:
    graph = torch.accelerator.Graph(**graph_args)  # type: ignore[arg-type]
    with torch.ember.stream(torch.ember.Stream()), graph:
        out = work()
    return graph, out


def test_an_eager_in_place_add_is_recorded_not_run_and_replayed() -> None:
    x = torch.zeros(4, device="ember")
    graph, _ = capture(lambda: x.add_(1))
    assert x.cpu().tolist() == [0.0] * 4  # recorded, not run
    graph.replay()
    graph.replay()
    assert x.cpu().tolist() == [2.0] * 4
    graph.reset()


def test_eager_kernels_keep_their_arguments_after_the_caller_returns() -> None:
    # Temporaries, CPU scalars, fills, where and reductions: each kernel owns what it uses.
    x = torch.arange(6, dtype=torch.float32, device="ember").reshape(2, 3)
    graph, out = capture(
        lambda: ((x * 2.5 + 1).relu().sum(dim=0), torch.where(x > 2, x, torch.zeros_like(x)))
    )
    graph.replay()
    expected = ((x.cpu() * 2.5 + 1).relu().sum(dim=0), torch.where(x.cpu() > 2, x.cpu(), 0.0))
    assert torch.equal(out[0].cpu(), expected[0]) and torch.equal(out[1].cpu(), expected[1])
    x.mul_(-1)  # replays read the inputs again
    graph.replay()
    assert torch.equal(out[0].cpu(), (x.cpu() * 2.5 + 1).relu().sum(dim=0))
    graph.reset()


def make_step(optimizer_name: str) -> tuple[nn.Module, Callable[[torch.Tensor, torch.Tensor], None]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)).to("ember")
    if optimizer_name == "sgd":
        opt: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=False)
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()

    return model, step


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_a_captured_training_step_replays_as_the_eager_one(optimizer_name: str) -> None:
    torch.manual_seed(1)
    batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(4)]
    eager, eager_step = make_step(optimizer_name)
    for x, y in batches:
        eager_step(x.to("ember"), y.to("ember"))
    graphed, step = make_step(optimizer_name)
    static_x = torch.zeros(8, 16, device="ember")
    static_y = torch.zeros(8, 4, device="ember")
    static_x.copy_(batches[0][0])
    static_y.copy_(batches[0][1])
    side = torch.ember.Stream()
    with torch.ember.stream(side):  # warm up: optimizer state and grads exist before the capture
        step(static_x, static_y)
    graph = torch.accelerator.Graph()
    with torch.ember.stream(side), graph:
        step(static_x, static_y)
    for x, y in batches[1:]:
        static_x.copy_(x)
        static_y.copy_(y)
        graph.replay()
    for mine, theirs in zip(graphed.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(mine.cpu(), theirs.cpu(), rtol=1e-5, atol=1e-6)
    graph.reset()


def test_copies_from_pinned_memory_and_between_device_buffers_are_replayed() -> None:
    host = torch.zeros(4).pin_memory()
    staged = torch.zeros(4, device="ember")
    moved = torch.zeros(4, device="ember")

    def work() -> None:
        staged.copy_(host, non_blocking=True)
        moved.copy_(staged * 2)

    graph, _ = capture(work)
    host.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    graph.replay()
    torch.ember.synchronize()
    assert moved.cpu().tolist() == [2.0, 4.0, 6.0, 8.0]
    host.fill_(5)  # a replay reads the pinned buffer again
    graph.replay()
    assert staged.cpu().tolist() == [5.0] * 4 and moved.cpu().tolist() == [10.0] * 4
    graph.reset()


def test_a_custom_operator_kernel_is_replayed() -> None:
    x = torch.tensor([-1.0, 2.0, -3.0], device="ember")
    graph, out = capture(lambda: torch.ops.ember.custom_abs(x))
    graph.replay()
    assert out.cpu().tolist() == [1.0, 2.0, 3.0]  # type: ignore[union-attr]
    x.mul_(2)
    graph.replay()
    assert out.cpu().tolist() == [2.0, 4.0, 6.0]  # type: ignore[union-attr]
    graph.reset()


@pytest.mark.parametrize(
    ("work", "names"),
    [
        (lambda x: x.sum().item(), "aten::_local_scalar_dense"),
        (lambda x: str(x), "aten::"),
        (lambda x: x.cpu(), "aten::_copy_from"),
        (lambda x: torch.ember.synchronize(), "emDeviceSynchronize"),
        (lambda x: torch.unique(x), "aten::_unique2"),
    ],
)
def test_what_cannot_be_captured_fails_in_cudas_words_and_invalidates_the_capture(
    work: Callable[[torch.Tensor], object], names: str
) -> None:
    x = torch.ones(4, device="ember")
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing") as raised:
        with torch.ember.stream(torch.ember.Stream()), graph:
            work(x)
    # The operator's error, then capture_end's (raised by the `with` block's exit, while the first propagates).
    first = raised.value.__context__ if raised.value.__context__ is not None else raised.value
    assert names in str(first) and "operation not permitted when stream is capturing" in str(first)
    assert "the graph capture failed" in str(raised.value)
    with pytest.raises(RuntimeError, match="holds no capture"):
        graph.replay()
    assert (x + 1).cpu().tolist() == [2.0] * 4  # nothing is left capturing


def test_a_capture_error_is_reported_again_by_capture_end() -> None:
    x = torch.ones(4, device="ember")
    graph = torch.accelerator.Graph()
    with torch.ember.stream(torch.ember.Stream()):
        graph.capture_begin()
        with pytest.raises(RuntimeError, match="aten::_local_scalar_dense"):
            x.sum().item()
        with pytest.raises(RuntimeError, match="the graph capture failed: operation not permitted"):
            graph.capture_end()


def test_the_graph_pool_holds_the_captures_memory_until_reset() -> None:
    gc.collect()  # an earlier test's garbage is freed now, not between the two measurements
    x = torch.ones(1 << 16, device="ember")
    torch.ember.synchronize()
    torch.ember.empty_cache()
    allocated, reserved = torch.ember.memory_allocated(), torch.ember.memory_reserved()
    graph, out = capture(lambda: (x * 2) + 1)
    assert torch.ember.memory_allocated() > allocated
    del out
    torch.ember.empty_cache()
    assert torch.ember.memory_reserved() > reserved  # kept for the replays
    graph.reset()
    torch.ember.empty_cache()
    assert torch.ember.memory_allocated() == allocated and torch.ember.memory_reserved() == reserved


Build = Callable[[], tuple[nn.Module, torch.optim.Optimizer]]
Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def eager_and_replayed(
    build: Build, loss: Loss, x: torch.Tensor, y: torch.Tensor
) -> tuple[nn.Module, nn.Module]:
    """Two models from `build`: one after 4 eager steps, one after a warm-up step and 3 replays of a captured one."""
    (eager, eager_opt), (captured, captured_opt) = build(), build()

    def step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
        opt.zero_grad(set_to_none=False)
        loss(model(x), y).backward()
        opt.step()

    side = torch.ember.Stream()
    with torch.ember.stream(side):
        step(captured, captured_opt)  # the warm-up makes the gradients and the optimizer's state
    torch.ember.synchronize()
    graph = torch.ember.EmberGraph()
    with torch.ember.graph(graph, stream=side):
        step(captured, captured_opt)  # recorded, not run
    for _ in range(4):
        step(eager, eager_opt)
    for _ in range(3):
        graph.replay()
    torch.ember.synchronize()
    graph.reset()
    return eager, captured


def test_a_step_with_cross_entropy_batch_norm_and_max_pooling_replays_equal_to_eager() -> None:
    # softmax, nll_loss, batch norm and max pooling run CPU kernels on host views (onHostOwned): recorded too.
    def build() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Unflatten(1, (2, 4, 4)), nn.BatchNorm2d(2), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8, 5)
        ).to("ember")
        return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    x, y = torch.randn(6, 32, device="ember"), torch.randint(0, 5, (6,), device="ember")
    eager, captured = eager_and_replayed(build, nn.functional.cross_entropy, x, y)
    for a, b in zip(eager.state_dict().values(), captured.state_dict().values(), strict=True):
        assert torch.equal(a.cpu(), b.cpu())  # weights, running statistics and the batch count


def dropout_training(seed: int, captured: bool, replays: int = 4) -> tuple[list[torch.Tensor], torch.Tensor]:
    """The parameters after 1 + replays steps of an MLP with dropout, and the generator's state after them."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 4)).to("ember")
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    batches = [(torch.randn(8, 16), torch.randn(8, 4)) for _ in range(1 + replays)]
    torch.ember.manual_seed(seed)

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=False)
        ((model(x) - y) ** 2).mean().backward()
        opt.step()

    if not captured:
        for x, y in batches:
            step(x.to("ember"), y.to("ember"))
    else:
        x, y = batches[0][0].to("ember"), batches[0][1].to("ember")
        side = torch.ember.Stream()
        with torch.ember.stream(side):
            step(x, y)  # the warm-up is the first batch's step
        graph = torch.ember.EmberGraph()
        with torch.ember.graph(graph, stream=side):
            step(x, y)  # recorded: reserves no numbers of the generator
        for x_cpu, y_cpu in batches[1:]:
            x.copy_(x_cpu)
            y.copy_(y_cpu)
            graph.replay()
        graph.reset()
    return [p.detach().cpu() for p in model.parameters()], torch.ember.get_rng_state()


def test_a_step_with_dropout_replays_equal_to_eager_and_leaves_the_generator_where_eager_would() -> None:
    eager, eager_state = dropout_training(123, captured=False)
    replayed_params, replayed_state = dropout_training(123, captured=True)
    assert all(torch.equal(a, b) for a, b in zip(eager, replayed_params, strict=True))
    assert torch.equal(eager_state, replayed_state)
    # The seed matters: another seed's masks give other parameters.
    other, _ = dropout_training(124, captured=True)
    assert not all(torch.equal(a, b) for a, b in zip(eager, other, strict=True))


@pytest.mark.parametrize(
    "draw",
    [
        lambda: torch.rand(64, device="ember"),
        lambda: torch.randn(8, 8, device="ember").t(),
        lambda: torch.randint(0, 100, (64,), device="ember"),
        lambda: torch.randint(0, 100, (64,), device="ember", dtype=torch.int32),
        lambda: torch.empty(64, device="ember").exponential_(),
        lambda: torch.empty(8, 8, device="ember").t().bernoulli_(0.5),
        lambda: torch.bernoulli(torch.linspace(0, 1, 64, device="ember")),
        lambda: torch.randperm(64, device="ember"),
        lambda: torch.multinomial(torch.linspace(1, 2, 64, device="ember"), 8),
        lambda: nn.functional.dropout(torch.ones(64, device="ember"), 0.5),
    ],
    ids=[
        "rand",
        "randn_t",
        "randint",
        "randint_int32",
        "exponential",
        "bernoulli_t",
        "bernoulli_p",
        "randperm",
        "multinomial",
        "dropout",
    ],
)
def test_each_replay_of_a_random_kernel_draws_what_the_next_eager_call_would(
    draw: Callable[[], torch.Tensor],
) -> None:
    torch.ember.manual_seed(7)
    graph, out = capture(draw)  # the capture reserves no number
    replays = []
    for _ in range(3):
        graph.replay()
        replays.append(out.cpu())  # type: ignore[union-attr]
    state = torch.ember.get_rng_state()
    graph.reset()
    torch.ember.manual_seed(7)
    eager = [draw().cpu() for _ in range(3)]
    assert all(torch.equal(a, b) for a, b in zip(replays, eager, strict=True))
    assert not torch.equal(replays[0], replays[1])
    assert torch.equal(state, torch.ember.get_rng_state())


def test_a_random_call_with_a_generator_of_its_own_is_refused_at_capture() -> None:
    # A replay draws from the default generator (CUDA asks for other generators to be registered with the graph).
    generator = torch.Generator(device="ember")
    with pytest.raises(RuntimeError, match="aten::uniform_ cannot be captured with a generator of its own"):
        capture(lambda: torch.rand(4, device="ember", generator=generator))
    assert torch.rand(4, device="ember", generator=generator).shape == (4,)  # eagerly it is fine


def test_each_replay_of_dropout_draws_a_new_mask() -> None:
    x = torch.ones(4096, device="ember")
    graph, out = capture(lambda: nn.functional.dropout(x, 0.5))
    masks = []
    for _ in range(3):
        graph.replay()
        masks.append(out.cpu() != 0)  # type: ignore[union-attr]
    assert not torch.equal(masks[0], masks[1]) and not torch.equal(masks[1], masks[2])
    assert all(0.4 < mask.float().mean().item() < 0.6 for mask in masks)
    torch.ember.manual_seed(5)
    graph.replay()
    first = out.cpu()  # type: ignore[union-attr]
    torch.ember.manual_seed(5)
    assert torch.equal(nn.functional.dropout(x, 0.5).cpu(), first)  # the replay drew eager's numbers
    graph.reset()


def replayed(work: Callable[[], object]) -> object:
    graph, out = capture(work)
    graph.replay()
    torch.ember.synchronize()
    graph.reset()  # the results' memory stays with the tensors
    return out


def test_functional_host_kernels_and_fallback_operators_are_recorded_with_the_meta_kernels_layout() -> None:
    torch.manual_seed(0)
    a, b = torch.randn(6, 5), torch.randn(6, 5)
    image, weight = torch.randn(2, 3, 6, 6), torch.randn(4, 3, 3, 3)
    cases: dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], object]] = {
        "layer_norm (host kernel)": lambda a, b, i, w: nn.functional.layer_norm(a, (5,)),
        "conv2d (host kernel)": lambda a, b, i, w: nn.functional.conv2d(i, w, padding=1),
        "mse_loss (fallback)": lambda a, b, i, w: nn.functional.mse_loss(a, b),
        "sort, two results (fallback)": lambda a, b, i, w: a.sort(dim=1),
        "cat, a tensor list (fallback)": lambda a, b, i, w: torch.cat([a, b.t().contiguous().t()]),
        "channels-last input (fallback)": lambda a, b, i, w: i.to(memory_format=torch.channels_last).erf(),
    }
    on_ember = [t.to("ember") for t in (a, b, image, weight)]
    for name, work in cases.items():
        out = replayed(lambda work=work: work(*on_ember))
        expected = work(a, b, image, weight)
        pairs = zip(
            [out] if isinstance(out, torch.Tensor) else out,
            [expected] if isinstance(expected, torch.Tensor) else expected,
            strict=True,
        )
        for got, want in pairs:
            assert got.device.type == "ember", name
            assert got.stride() == want.stride(), name
            torch.testing.assert_close(got.cpu(), want, msg=name)


def test_a_captured_out_tensor_is_resized_as_the_meta_kernel_resizes_it() -> None:
    a, b = torch.randn(6, 5, device="ember"), torch.randn(6, 5, device="ember")
    out = torch.empty(0, device="ember")
    replayed(lambda: torch.atan2(a, b, out=out))
    assert out.shape == (6, 5) and torch.equal(out.cpu(), torch.atan2(a.cpu(), b.cpu()))


def test_a_step_with_convolution_layer_norm_and_mse_loss_replays_equal_to_eager() -> None:
    # The convolution and layer norm are functional host kernels; mse_loss and its gradient reach the fallback.
    def build() -> tuple[nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Conv2d(3, 4, 3, padding=1), nn.LayerNorm([4, 6, 6]), nn.GELU(), nn.Flatten(), nn.Linear(144, 5)
        ).to("ember")
        return model, torch.optim.Adam(model.parameters(), lr=0.01, capturable=True)

    x, y = torch.randn(4, 3, 6, 6, device="ember"), torch.randn(4, 5, device="ember")
    eager, captured = eager_and_replayed(build, nn.functional.mse_loss, x, y)
    for a, b in zip(eager.parameters(), captured.parameters(), strict=True):
        torch.testing.assert_close(b.cpu(), a.cpu(), rtol=1e-5, atol=1e-6)


def test_an_operator_whose_result_size_depends_on_values_is_refused_by_name() -> None:
    x = torch.randn(3, 8, device="ember")
    graph = torch.accelerator.Graph()
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing") as raised:
        with torch.ember.stream(torch.ember.Stream()), graph:
            torch.unique(x)
    first = raised.value.__context__ if raised.value.__context__ is not None else raised.value
    assert "aten::_unique2" in str(first)
    assert (x + 1).cpu().shape == (3, 8)  # nothing is left capturing


@pytest.mark.filterwarnings("ignore:Using a target size")  # mse_loss's own warning, before its error
def test_a_bad_call_fails_at_the_capture_with_pytorchs_message() -> None:
    # The meta kernel checks the arguments when the call is recorded: a replay would have nobody to tell.
    a, b = torch.randn(6, 5, device="ember"), torch.randn(3, 5, device="ember")
    graph = torch.accelerator.Graph()
    with pytest.raises(
        RuntimeError, match=r"The size of tensor a \(6\) must match the size of tensor b \(3\)"
    ):
        with torch.ember.stream(torch.ember.Stream()), graph:
            nn.functional.mse_loss(a, b)


def test_a_recorded_result_keeps_the_strides_it_had_at_the_capture() -> None:
    # rot90 returns flip's result after transpose_(): the recorded flip writes with the strides it was captured
    # with, as a CUDA kernel records its pointers and strides, not with those its result has by the replay.
    x = torch.randn(3, 4, device="ember")
    graph, out = capture(lambda: torch.rot90(x, 1, (0, 1)))
    for _ in range(2):
        x.copy_(torch.randn(3, 4))
        graph.replay()
        assert torch.equal(out.cpu(), torch.rot90(x.cpu(), 1, (0, 1)))  # type: ignore[union-attr]
    graph.reset()
