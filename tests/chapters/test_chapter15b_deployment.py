"""Chapter 15b's claims: where chapter 15 leaves deployment, and what the chapter's backend adds.

The first tests run on the backend chapter 15 ends with (`Chapter.of("compile").build()`), with the
package's compiler registered as chapter 15 registers it: the two failures the chapter opens with.
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from book.builds.driver import load_package
from book.run.chapter import Chapter

compiler = load_package("compiler")


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8)).to("ember")


@pytest.fixture(scope="module")
def compile_backend():  # noqa: ANN201
    build = Chapter.of("compile").build()
    compiler.register(torch.ember, build.library)
    logging.getLogger("torch._inductor.utils").setLevel(logging.ERROR)
    return build


def test_chapter15_cannot_capture_an_eager_kernel(compile_backend) -> None:  # noqa: ANN001
    x = torch.zeros(2000, device="ember")
    with pytest.raises(RuntimeError, match="invalidated by emLaunchKernel"):
        with torch.Stream(), torch.accelerator.Graph():
            x += 1


def test_chapter15_cannot_package_a_model_with_aotinductor(compile_backend) -> None:  # noqa: ANN001
    model = mlp().eval()
    program = torch.export.export(model, (torch.randn(8, 64, device="ember"),))
    with pytest.raises(Exception, match="no C shim of ATen's operators for ember"):
        torch._inductor.aoti_compile_and_package(program)
