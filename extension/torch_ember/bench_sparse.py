"""The sparse figures of `python -m torch_ember.bench` (csrc/sparse/), ember / CPU, lower is better.

- ``sparse_mm_vs_cpu``: ``torch.sparse.mm`` of a 4096x4096 COO matrix at 1 % density (coalesced,
  float32) and a dense 4096x64 matrix, ember / CPU (target <= 1.3).
- ``sparse_embedding_step_vs_cpu``: one training step of ``nn.Embedding(100000, 64, sparse=True)``
  with ``SparseAdam`` on a batch of 4096 indices (forward, a squared-sum loss, backward, the
  optimizer's step, ``zero_grad``), ember / CPU, same initial weights and batch (target <= 1.3).

Context: ``sparse_mm_cpu_us`` and ``sparse_embedding_step_cpu_us``; ``fallback_calls_sparse_embedding_step``
counts the calls that reach the CPU fallback in one step (target 0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from torch_ember.bench_timing import Target, interleaved, median_us, ratio, synced

SIZE, DENSITY, COLUMNS = 4096, 0.01, 64
ROWS, FEATURES, BATCH = 100_000, 64, 4096

TARGETS: dict[str, Target] = {
    "sparse_mm_vs_cpu": Target(1.3, at_most=True),
    "sparse_embedding_step_vs_cpu": Target(1.3, at_most=True),
    "fallback_calls_sparse_embedding_step": Target(0, at_most=True),
}

TABLE_ROWS = [
    ("sparse.mm, 4096^2 COO at 1% @ 4096x64 (ember / CPU)", "sparse_mm_vs_cpu"),
    ("sparse Embedding + SparseAdam step (ember / CPU)", "sparse_embedding_step_vs_cpu"),
    ("sparse Embedding step: calls to the CPU fallback", "fallback_calls_sparse_embedding_step"),
]


def sparse_matrix() -> torch.Tensor:
    """The COO matrix of ``sparse_mm_vs_cpu``: SIZE x SIZE, DENSITY of it non-zero, coalesced."""
    generator = torch.Generator().manual_seed(0)
    nnz = int(SIZE * SIZE * DENSITY)
    indices = torch.randint(0, SIZE, (2, nnz), generator=generator)
    values = torch.randn(nnz, generator=generator)
    return torch.sparse_coo_tensor(indices, values, (SIZE, SIZE), check_invariants=False).coalesce()


class EmbeddingStep:
    """One training step of a sparse embedding with SparseAdam on `device`; every device starts from
    the same table and batch."""

    def __init__(self, device: str) -> None:
        torch.manual_seed(0)
        self.embedding = nn.Embedding(ROWS, FEATURES, sparse=True).to(device)
        self.optimizer = torch.optim.SparseAdam(self.embedding.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(1)
        self.indices = torch.randint(0, ROWS, (BATCH,), generator=generator).to(device)

    def __call__(self) -> None:
        self.embedding(self.indices).pow(2).sum().backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def measure(
    repeat: int,
    results: dict[str, float],
    fallback_ops: dict[str, list[str]],
    fallback_calls: Callable[[Callable[[], object]], tuple[int, list[str]]],
) -> None:
    """The figures above into `results`; `fallback_calls` is `bench.fallback_calls` (the counter)."""
    cpu_matrix, dense = (
        sparse_matrix(),
        torch.randn(SIZE, COLUMNS, generator=torch.Generator().manual_seed(2)),
    )
    ember_matrix, ember_dense = cpu_matrix.to("ember"), dense.to("ember")
    cpu, ember = interleaved(
        [
            lambda: torch.sparse.mm(cpu_matrix, dense),
            synced(lambda: torch.sparse.mm(ember_matrix, ember_dense)),
        ],
        max(3, repeat // 10),
    )
    results["sparse_mm_vs_cpu"] = ratio(ember, cpu)
    results["sparse_mm_cpu_us"] = median_us(cpu)

    cpu_step, ember_step = EmbeddingStep("cpu"), EmbeddingStep("ember")
    cpu, ember = interleaved([cpu_step, synced(ember_step)], max(3, repeat // 10))
    results["sparse_embedding_step_vs_cpu"] = ratio(ember, cpu)
    results["sparse_embedding_step_cpu_us"] = median_us(cpu)
    count, names = fallback_calls(ember_step)  # after interleaved's warm-up: a steady step
    results["fallback_calls_sparse_embedding_step"] = count
    fallback_ops["sparse embedding"] = names
