"""The benchmark (`python -m torch_ember.bench`): its plumbing, its fallback counter, its keys and its table.

Speed itself is not asserted here (a shared CI machine can't promise it): the tests check that
every figure is measured and written, and that the counts and the targets mean what they say.
"""

from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
import torch_ember
from torch_ember import bench, bench_distributed, bench_sparse, bench_timing


def test_fallback_add_computes_on_the_cpu_and_returns_an_ember_tensor() -> None:
    a = torch.arange(6.0).reshape(2, 3)
    b = torch.full((3,), 0.5)
    result = torch_ember._C._fallback_add(a.to("ember"), b.to("ember"))
    assert result.device == torch.device("ember", 0)
    torch.testing.assert_close(result.cpu(), a + b, rtol=0, atol=0)


def test_the_fallback_counter_counts_fallback_calls_only() -> None:
    a, b = torch.ones(4, device="ember"), torch.ones(4, device="ember")
    count, names = bench.fallback_calls(lambda: torch_ember._C._fallback_add(a, b))
    assert (count, names) == (1, ["aten::add.Tensor"])
    count, names = bench.fallback_calls(lambda: a + b)  # ember's own add kernel
    assert (count, names) == (0, [])


@torch.library.custom_op("ember_bench_test::scale", mutates_args=(), device_types="cpu")
def _scale(x: torch.Tensor, factor: float) -> torch.Tensor:
    """An operator with a CPU kernel only: on ember it runs through the fallback."""
    return x * factor


def _scale_backward(ctx: object, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    return _scale(grad, ctx.factor), None  # type: ignore[attr-defined]


def _scale_setup(ctx: object, inputs: tuple[torch.Tensor, float], output: torch.Tensor) -> None:
    ctx.factor = inputs[1]  # type: ignore[attr-defined]


_scale.register_autograd(_scale_backward, setup_context=_scale_setup)


def test_the_fallback_counter_sees_calls_the_autograd_engine_makes() -> None:
    # The backward's call comes from the engine, not from the caller; it is counted all the same.
    x = torch.ones(4, device="ember", requires_grad=True)
    count, names = bench.fallback_calls(lambda: _scale(x, 3.0).sum().backward())
    assert (count, names) == (2, ["ember_bench_test::scale", "ember_bench_test::scale"])
    assert x.grad is not None
    torch.testing.assert_close(x.grad.cpu(), torch.full((4,), 3.0))


def test_training_steps_start_from_the_same_weights_on_every_device() -> None:
    # The step ratios compare like with like: one step on each device gives the same weights.
    cpu_step, ember_step = bench.TrainingStep("mlp", "cpu"), bench.TrainingStep("mlp", "ember")
    cpu_step()
    ember_step()
    cpu_params = list(cpu_step.model.parameters())
    ember_params = list(ember_step.model.parameters())
    assert len(cpu_params) == 6
    for cpu, ember in zip(cpu_params, ember_params, strict=True):
        assert ember.device.type == "ember"
        torch.testing.assert_close(ember.cpu(), cpu, rtol=1e-4, atol=1e-5)


def test_the_sparse_embedding_step_is_the_same_step_on_both_devices() -> None:
    # sparse_embedding_step_vs_cpu compares like with like: one step on each device, the same table.
    cpu_step, ember_step = bench_sparse.EmbeddingStep("cpu"), bench_sparse.EmbeddingStep("ember")
    cpu_step()
    ember_step()
    assert ember_step.embedding.weight.device.type == "ember"
    torch.testing.assert_close(ember_step.embedding.weight.detach().cpu(), cpu_step.embedding.weight.detach())
    assert bench.TARGETS["sparse_mm_vs_cpu"].met(1.3) and not bench.TARGETS["sparse_mm_vs_cpu"].met(1.31)
    assert {"sparse_mm_vs_cpu", "sparse_embedding_step_vs_cpu"} <= set(bench.STABLE_KEYS)


def test_a_compiled_training_step_equals_the_eager_one() -> None:
    # The compiled step ratio times the same work: compiled, one step gives the eager step's weights.
    eager_step, compiled_step = (
        bench.TrainingStep("mlp", "ember"),
        bench.TrainingStep("mlp", "ember", compiled=True),
    )
    for _ in range(2):  # the second step uses the momentum buffers
        eager_step()
        compiled_step()
    eager_params = list(eager_step.model.parameters())
    compiled_params = list(compiled_step.model.parameters())
    for eager, compiled in zip(eager_params, compiled_params, strict=True):
        assert compiled.device.type == "ember"
        torch.testing.assert_close(compiled.detach().cpu(), eager.detach().cpu())


def test_allocator_timing_loop_frees_what_it_allocates() -> None:
    lib = bench._support_library()
    before = torch.ember.memory_allocated()
    for raw in (False, True):
        for touch in (False, True):
            assert bench._alloc_free_seconds(lib, raw=raw, touch=touch) > 0
    assert torch.ember.memory_allocated() == before


def test_only_the_ember_side_is_synchronized(monkeypatch: pytest.MonkeyPatch) -> None:
    # A CPU call is timed bare: a synchronize added to it would shrink every ember / CPU ratio.
    calls: list[str] = []
    monkeypatch.setattr(bench_timing, "synchronize", lambda: calls.append("sync"))
    samples = bench_timing.interleaved(
        [lambda: calls.append("cpu"), bench_timing.synced(lambda: calls.append("ember"))], rounds=3, warmup=1
    )
    assert [len(times) for times in samples] == [3, 3]
    assert calls == ["cpu", "ember", "sync"] * 4


def test_a_ratio_is_the_median_of_the_rounds_ratios() -> None:
    # Round by round: a slow round (both sides 10x) does not move the figure.
    assert bench_timing.ratio([2.0, 20.0, 2.0], [1.0, 10.0, 1.0]) == 2.0
    # Per round 2, 0.2, 2: the figure is 2 (the ratio of the two medians would be 0.2).
    assert bench_timing.ratio([2.0, 2.0, 20.0], [1.0, 10.0, 10.0]) == 2.0


def test_the_benchmarks_share_their_timing_and_neither_imports_the_other_to_load() -> None:
    # bench_timing is the bottom; bench imports bench_distributed only for --distributed, inside main.
    def imported(module: ModuleType) -> set[str]:
        tree = ast.parse(Path(str(module.__file__)).read_text())
        top = [node for node in tree.body if isinstance(node, ast.ImportFrom) and node.module]
        return {f"{node.module}.{alias.name}" for node in top for alias in node.names} | {
            str(node.module) for node in top
        }

    assert not {name for name in imported(bench_timing) if name.startswith("torch_ember")}
    assert "torch_ember.bench_timing" in imported(bench) & imported(bench_distributed)
    assert not {"torch_ember.bench", "torch_ember.bench_distributed"} & imported(bench)
    assert "torch_ember.bench" not in imported(bench_distributed)
    assert bench.Target is bench_distributed.Target is bench_timing.Target


def test_targets_read_both_ways() -> None:
    assert bench.TARGETS["add_1m_vs_cpu"].met(1.2) and not bench.TARGETS["add_1m_vs_cpu"].met(1.21)
    assert bench.TARGETS["h2d_vs_memcpy"].met(0.8) and not bench.TARGETS["h2d_vs_memcpy"].met(0.79)
    assert not bench.TARGETS["fallback_calls_cnn_step"].met(1)
    assert bench.TARGETS["compiled_pointwise_chain_vs_eager"].met(0.4)
    assert not bench.TARGETS["compiled_mlp_step_vs_cpu_compiled"].met(1.21)
    assert {"compiled_pointwise_chain_vs_eager", "compiled_mlp_step_vs_cpu_compiled"} <= set(
        bench.STABLE_KEYS
    )


def test_table_marks_each_target_met_or_not() -> None:
    results = {key: 1.0 for _, key in bench.ROWS}
    results.update({key: 1.0 for key in (*bench.CONTEXT_KEYS, "load_average")})
    results["cached_alloc_speedup"] = 3.0  # target >= 10
    results["fallback_calls_cnn_step"] = 2
    text = bench.table(results, {"cnn": ["aten::foo", "aten::foo"], "mlp": []})
    rows = {line.split("  ")[0]: line for line in text.splitlines()}
    assert rows["1 MiB alloc+free: driver / allocator"].endswith("NO")
    assert rows["add, 1M float32, out= (ember / CPU)"].endswith("yes")
    assert rows["CNN step: calls to the CPU fallback"].endswith("NO")
    assert "CNN step, operators run by the CPU fallback: aten::foo x2" in text
    assert "MLP step, operators" not in text
    assert "the machine was busy" not in text
    assert "(context: CPU add of 1M float32 1 us" in text
    results["load_average"] = 2.0 * (os.cpu_count() or 1) + 1
    assert "the machine was busy" in bench.table(results)


def test_distributed_rotation_gives_each_call_the_first_place_in_turn() -> None:
    calls: list[str] = []
    samples = bench_distributed.rotated([lambda c=c: calls.append(c) for c in "abc"], rounds=3, warmup=1)
    assert [len(times) for times in samples] == [3, 3, 3]
    assert "".join(calls) == "abc" + "abc" + "bca" + "cab"


def test_auto_is_compared_with_the_better_fixed_algorithm_round_by_round() -> None:
    # The ring is the better (lower median time); auto took 2 in a round where the ring took 1.
    fixed = {"one_shot": [4.0, 4.0, 4.0], "ring": [1.0, 2.0, 2.0]}
    assert bench_distributed.auto_vs_best([2.0, 2.0, 2.0], fixed) == 1.0
    assert bench_distributed.auto_vs_best([2.0, 4.0, 4.0], fixed) == 0.5


def test_distributed_targets_and_table() -> None:
    target = bench_distributed.TARGETS["allreduce_auto_vs_best_min"]
    assert target.met(0.9) and not target.met(0.89)
    assert "allreduce_auto_vs_best_min" in bench_distributed.STABLE_KEYS
    results = {key: 1.0 for key in bench_distributed.TARGETS}
    for label in bench_distributed.SIZES:
        results[f"allreduce_{label}_auto_vs_best"] = 1.0
        for algorithm in bench_distributed.ALGORITHMS:
            results[f"allreduce_{label}_busbw_{algorithm}_gbps"] = 1.0
    for key in ("allreduce_64m_eccl_busbw_gbps", "allreduce_64m_gloo_busbw_gbps", "memcpy_gbps"):
        results[key] = 1.0
    results.update(ddp_step_2proc_us=1.0, ddp_step_1proc_us=1.0, load_average=0.0)
    results["allreduce_auto_vs_best_min"] = 0.8
    rows = {line.split("  ")[0]: line for line in bench_distributed.table(results).splitlines()}
    assert rows["all_reduce 4 KiB-64 MiB: auto / best fixed busbw, min"].endswith(">= 0.9  NO")
    assert rows["all_reduce 64 MiB, 2 ranks: eccl / gloo busbw"].endswith("NO")  # 1.0, target >= 2
    assert rows["training step: DDP on 2 ranks / 1 process"].endswith("yes")
    assert rows["auto/best"].split()[1:] == ["1.00"] * len(bench_distributed.SIZES)


def test_the_command_writes_every_key_with_a_finite_value(tmp_path: Path) -> None:
    # `python -m torch_ember.bench` itself, in a fresh process where import torch autoloads the package.
    path = tmp_path / "bench.json"
    environment = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "torch_ember.bench", "--repeat", "3", "--json", str(path)],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(path.read_text())
    assert set(bench.STABLE_KEYS) <= results.keys()
    for key, value in results.items():
        if key.startswith("fallback_calls_"):
            assert isinstance(value, int) and value >= 0, key
        elif key == "load_average":
            assert value >= 0
        else:
            assert math.isfinite(value) and value > 0, key
    for label, _ in bench.ROWS:
        assert label in done.stdout


def test_only_measures_the_named_parts_and_refuses_an_unknown_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bench.json"
    bench.main(["--only", "add,allocator", "--repeat", "2", "--json", str(path)])
    results = json.loads(path.read_text())
    assert {"add_1m_vs_cpu", "latency_1elem_vs_cpu", "cached_alloc_speedup"} <= results.keys()
    assert not {"h2d_vs_memcpy", "mlp_step_vs_cpu", "aoti_vs_compiled"} & results.keys()
    shown = capsys.readouterr().out
    assert "add, 1 element (ember / CPU)" in shown and "MLP training step" not in shown
    assert "(context:" not in shown  # it names figures of parts left out
    with pytest.raises(SystemExit):
        bench.main(["--only", "add,warp_speed"])
    assert "--only: unknown warp_speed" in capsys.readouterr().err


def test_profile_shows_where_a_steps_time_goes_on_both_devices(capsys: pytest.CaptureFixture[str]) -> None:
    bench.main(["--profile", "mlp"])
    printed = capsys.readouterr().out
    cpu, ember = printed.split("MLP step on ember")
    assert "MLP step on cpu" in cpu
    for table in (cpu, ember):
        assert "aten::addmm" in table  # the Linear layers, forward
        assert "Self CPU time total" in table
