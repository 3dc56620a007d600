"""Chapter 15b (`deployment`): where chapter 15 leaves deployment, eager graphs and AOTInductor on the chapter's
backend.

The chapter's backends are chapter 15's (`Chapter.of("compile").build()`), on which the two opening failures
happen, and the one the chapter ends with (`Chapter.of("deployment").build()`: recordable launches, ember's C
shim and its AOTInductor model runner), with the package's compiler registered as the chapter registers it. Chapter 13
names the backend `ember`, and a process can name PrivateUse1 only once, so they run in a child process that
prints its facts as JSON.
"""

from __future__ import annotations

import pytest
from book_child import child_facts

from book.run.chapter import Chapter

CHILD_TIMEOUT_SECONDS = 900


def test_the_chapter_follows_the_compile_chapter_and_builds_the_shim_and_the_runner() -> None:
    chapter = Chapter.of("deployment")
    assert chapter.index == Chapter.of("compile").index + 1
    assert {"aoti_shim", "aoti_runner", "recorded_launch"} <= {part.name for part in chapter.parts()}
    assert {"aoti_shim", "aoti_runner"} <= {part.name for part in chapter.build_cells()[-1]}


@pytest.fixture(scope="module")
def facts() -> dict:
    code = """
        import ctypes, io, json, logging, os, warnings
        import book, torch
        from torch import nn
        from torch.fx.experimental import proxy_tensor
        from book.builds.driver import load_package
        from book.run.chapter import Chapter

        logging.getLogger("torch._inductor.utils").setLevel(logging.ERROR)
        warnings.filterwarnings("ignore", category=FutureWarning)
        compiler = load_package("compiler")
        facts = {}

        def error(call):
            try:
                call()
            except Exception as e:  # noqa: BLE001
                return f"{type(e).__name__}: {e}"
            return None

        def mlp():
            torch.manual_seed(0)
            return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to("ember").eval()

        build = Chapter.of("compile").build()
        compiler.register(torch.ember, build.library)
        x = torch.zeros(2000, device="ember")

        def capture():
            with torch.Stream(), torch.accelerator.Graph():
                x.add_(1)

        facts["capture"] = error(capture)
        model, inputs = mlp(), torch.randn(8, 64, device="ember")
        program = torch.export.export(model, (inputs,))
        facts["package"] = error(lambda: torch._inductor.aoti_compile_and_package(program))
        del x, model, inputs, program
        proxy_tensor._FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT.clear()

        build = Chapter.of("deployment").build()
        ctypes.CDLL(str(build.library), mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
        compiler.register(torch.ember, build.library)
        compiler.aoti.register()

        x = torch.zeros(4, device="ember")
        graph = torch.accelerator.Graph()
        with torch.Stream(), graph:
            x.add_(1)
        graph.replay()
        graph.replay()
        facts["replayed_add"] = x.cpu().tolist()
        graph.reset()

        def trained(captured, conv=False):
            torch.manual_seed(0)
            net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).to("ember")
            if conv:  # functional host kernels (convolution, layer norm) and the fallback's mse_loss
                net = nn.Sequential(
                    nn.Unflatten(1, (2, 2, 2)), nn.Conv2d(2, 3, 2, padding=1), nn.LayerNorm([3, 3, 3]),
                    nn.Flatten(), nn.Linear(27, 2),
                ).to("ember")
            optimizer = torch.optim.Adam(net.parameters(), lr=0.01, capturable=True)
            data = torch.randn(4, 8, device="ember")
            target = torch.randn(4, 2, device="ember")

            def step():
                optimizer.zero_grad(set_to_none=False)
                out = net(data)
                loss = nn.functional.mse_loss(out, target) if conv else (out * out).mean()
                loss.backward()
                optimizer.step()

            side = torch.ember.Stream()
            with torch.ember.stream(side):
                step()
                if not captured:
                    step()
                    step()
            if captured:
                steps = torch.ember.EmberGraph()
                with torch.ember.graph(steps, stream=side):
                    step()
                steps.replay()
                steps.replay()
                steps.reset()
            return [p.detach().cpu() for p in net.parameters()]

        pairs = zip(trained(True), trained(False), strict=True)
        facts["step_difference"] = max((a - b).abs().max().item() for a, b in pairs)
        pairs = zip(trained(True, conv=True), trained(False, conv=True), strict=True)
        facts["conv_step_difference"] = max((a - b).abs().max().item() for a, b in pairs)
        ones = torch.ones(64, device="ember")
        torch.ember.manual_seed(3)
        eager_masks = [(nn.functional.dropout(ones, 0.5) != 0).tolist() for _ in range(3)]
        torch.ember.manual_seed(3)
        dropped = torch.ember.EmberGraph()
        with torch.ember.graph(dropped):
            kept = nn.functional.dropout(ones, 0.5) != 0
        replayed_masks = []
        for _ in range(3):
            dropped.replay()
            replayed_masks.append(kept.tolist())
        facts["dropout_masks_equal"] = replayed_masks == eager_masks
        facts["dropout_masks_differ"] = replayed_masks[0] != replayed_masks[1]
        facts["offset_after_replays"] = torch.ember.default_generator(0).get_offset()
        dropped.reset()
        del ones, kept
        try:
            with torch.ember.graph(torch.ember.EmberGraph()):
                x.sum().item()
        except RuntimeError as e:
            facts["item_errors"] = [str(e.__context__), str(e)]
        del x, graph
        model, inputs = mlp(), torch.randn(8, 64, device="ember")
        archive = io.BytesIO()
        torch._inductor.aoti_compile_and_package(
            torch.export.export(model, (inputs,)), package_path=archive
        )
        archive.seek(0)
        loaded = torch._inductor.aoti_load_package(archive)
        with torch.no_grad():
            out, eager = loaded(inputs), model(inputs)
        facts["device"] = str(out.device)
        facts["max_difference"] = (out.cpu() - eager.cpu()).abs().max().item()
        print(json.dumps(facts))
    """
    found, _ = child_facts(code, CHILD_TIMEOUT_SECONDS)
    return found


def test_chapter15_cannot_capture_an_eager_kernel(facts: dict) -> None:
    assert facts["capture"] is not None and "invalidated by emLaunchKernel" in facts["capture"]


def test_chapter15_cannot_package_a_model_with_aotinductor(facts: dict) -> None:
    assert facts["package"] is not None
    assert (
        "cannot call at::addmm_out: PyTorch has no C shim of ATen's operators for ember" in facts["package"]
    )


def test_the_chapters_backend_runs_an_aotinductor_package_equal_to_eager(facts: dict) -> None:
    assert facts["device"] == "ember:0"
    assert facts["max_difference"] <= 1e-5


def test_the_chapters_backend_captures_and_replays_eager_kernels(facts: dict) -> None:
    assert facts["replayed_add"] == [2.0] * 4  # recorded at the capture, run by each replay


def test_a_captured_adam_step_replays_equal_to_eager_steps(facts: dict) -> None:
    # Adam's pointwise operators (optimizer_host_ops) are recorded host kernels, not the fallback's copies.
    assert facts["step_difference"] <= 1e-6


def test_a_host_read_in_a_capture_fails_in_cudas_words_naming_the_operator(facts: dict) -> None:
    operator_error, capture_error = facts["item_errors"]
    assert "aten::_local_scalar_dense: operation not permitted when stream is capturing" in operator_error
    assert "the graph capture failed: operation not permitted when stream is capturing" in capture_error


def test_a_captured_step_through_functional_host_kernels_and_the_fallback_replays_equal_to_eager(
    facts: dict,
) -> None:
    # Convolution and layer norm are functional host kernels, mse_loss the fallback's: both recorded by
    # hostKernelCaptured, with results allocated from the meta kernels' sizes.
    assert facts["conv_step_difference"] <= 1e-6


def test_dropout_replays_draw_what_the_same_eager_calls_draw(facts: dict) -> None:
    # The graph reserves its one counter value per replay from the generator: the masks of three replays are
    # those of three eager calls after the same seed, each new, and the generator ends where eager's would.
    assert facts["dropout_masks_equal"] and facts["dropout_masks_differ"]
    assert facts["offset_after_replays"] == 3
