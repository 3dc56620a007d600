"""Chapter 14's kernels, checked on the backend the chapter builds from its cells.

One child process loads chapter 14's build (as the chapter's kernel does: chapter 13's name and the autograd
engine's device queues are once-per-process state, see tests/conftest.py), runs the checks and reports JSON:

- the shared benchmark models' training steps (notes ISSUE8: MLP and CNN, cross_entropy, SGD with momentum,
  zero_grad) make no CPU-fallback call: the fallback copies its arguments with `aten::_to_cpu`, which a profile
  shows, and the probe is shown to see an operator that still falls back;
- float16 and bfloat16 elementwise operations and reductions equal the CPU's bits;
- an error raised inside a host kernel names the operator and the device.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

CHILD = textwrap.dedent(
    """
    import json

    import book  # before torch: it turns PyTorch's backend autoload off
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.profiler import ProfilerActivity, profile
    from book.run.chapter import Chapter

    Chapter.of("capstone").build({})
    E = torch.device("ember", 0)
    facts = {}

    def fallback_calls(step):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            step()
        return sorted(e.cpu_parent.name for e in prof.events() if e.name == "aten::_to_cpu" and e.cpu_parent)

    def training_step(model, x):
        torch.manual_seed(0)
        model, x = model.to(E), x.to(E)
        y = torch.randint(0, 10, (x.shape[0],)).to(E)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step():
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

        step()  # creates the momentum buffers
        return step

    mlp = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    cnn = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Dropout(0.1), nn.Linear(32, 10),
    )
    facts["mlp"] = fallback_calls(training_step(mlp, torch.randn(64, 256)))
    facts["cnn"] = fallback_calls(training_step(cnn, torch.randn(32, 3, 32, 32)))
    square = torch.randn(4, 4).to(E)
    facts["probe"] = fallback_calls(lambda: torch.linalg.matrix_norm(square, ord="nuc"))

    a, b = torch.randn(6, 5), torch.randn(6, 5)
    facts["low_precision_equal"] = {
        str(dtype): [
            torch.equal(op(a.to(dtype).to(E), b.to(dtype).to(E)).cpu(), op(a.to(dtype), b.to(dtype)))
            for op in (
                lambda x, y: x + y, lambda x, y: x * y - y, lambda x, y: x.sum(0), lambda x, y: x.mean(),
                lambda x, y: x.exp(), lambda x, y: F.relu(x), lambda x, y: x < y,
            )
        ]
        for dtype in (torch.float16, torch.bfloat16)
    }
    try:
        F.nll_loss(torch.randn(2, 3).to(E), torch.tensor([0, 5]).to(E))
    except IndexError as error:
        facts["nll_error"] = str(error)
    print(json.dumps(facts))
    """
)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_benchmark_training_steps_make_no_fallback_calls(facts: dict[str, Any]) -> None:
    assert facts["probe"], "the probe must see an operator that still falls back"
    assert facts["mlp"] == []
    assert facts["cnn"] == []


def test_float16_and_bfloat16_results_equal_the_cpu(facts: dict[str, Any]) -> None:
    for dtype, equal in facts["low_precision_equal"].items():
        assert all(equal), (dtype, equal)


def test_a_host_kernel_error_names_the_operator_and_device(facts: dict[str, Any]) -> None:
    assert "out of bounds" in facts["nll_error"]
    assert "ember: in aten::nll_loss_forward on ember:0" in facts["nll_error"]
