"""Chapter 19 (`layouts`): sparse COO, sparse CSR and quantized tensors on ember.

The backend under test is the one the chapter ends with (`Chapter.of("layouts").build()`). Chapter 13
names the backend `ember`, and a process can name PrivateUse1 only once, so the backend runs in a
child process that prints its facts as JSON.
"""

from __future__ import annotations

import textwrap

import pytest
from book_child import child_facts

from book.run.chapter import Chapter

CHILD_TIMEOUT_SECONDS = 900
SPARSE_PARTS = (
    "sparse_guard",
    "sparse_coo_structure",
    "sparse_host_api",
    "sparse_host_twins",
    "sparse_host_kernel",
    "sparse_coo_to_sparse",
    "sparse_coo_arithmetic",
    "sparse_addmm",
    "sparse_dense_ops",
    "sparse_csr",
)
QUANTIZED_PARTS = (
    "quantized_memory_api",
    "quantized_memory",
    "quantize_stubs",
    "quantize_ops",
    "quantized_tensors",
    "quantized_views",
    "quantized_linear",
)


def test_the_chapter_builds_the_sparse_and_quantized_parts_after_the_contracts() -> None:
    chapter = Chapter.of("layouts")
    assert chapter.index == Chapter.of("contracts").index + 1
    own = {part.name for part in chapter.parts()}
    assert set(SPARSE_PARTS) | set(QUANTIZED_PARTS) | {"sparse_factories"} <= own
    # Three build cells: COO, the rest of the sparse rows, then the quantized row on top of them.
    first, second = chapter.build_cells()[-2:]
    assert set(SPARSE_PARTS) <= {part.name for part in first}
    assert set(QUANTIZED_PARTS) <= {part.name for part in second}


def test_the_sparse_refusal_is_revised_away_and_earlier_chapters_keep_it() -> None:
    def factories(slug: str) -> str:
        (part,) = [p for p in Chapter.of(slug).parts_through() if p.name == "sparse_factories"]
        return part.source

    assert "TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1" in factories("minimal_ops")
    assert "TORCH_LIBRARY_IMPL(aten, SparsePrivateUse1" in factories("contracts")
    assert "TORCH_LIBRARY_IMPL" not in factories("layouts")


@pytest.fixture(scope="module")
def layouts() -> dict:
    code = textwrap.dedent(
        """
        import json
        import book, torch
        from book.run.chapter import Chapter

        Chapter.of("layouts").build()
        facts = {}

        def error(call):
            try:
                call()
            except NotImplementedError as e:
                return str(e).split(". ")[0]
            return None

        # The opening failure: a sparse embedding's gradient, now on ember.
        embedding = torch.nn.Embedding(10, 4, sparse=True).to("ember")
        embedding(torch.tensor([1, 2, 2, 7], device="ember")).sum().backward()
        grad = embedding.weight.grad
        facts["grad"] = [str(grad.layout), str(grad.device), grad.coalesce().indices().tolist()]

        # COO: coalesce sums duplicates as the CPU does; sparse @ dense with gradients.
        i = torch.tensor([[0, 1, 1, 0], [2, 0, 2, 2]])
        v = torch.tensor([1.0, 2.0, 3.0, 4.0])
        s = torch.sparse_coo_tensor(i.to("ember"), v.to("ember"), (2, 3))
        c = s.coalesce()
        expected = torch.sparse_coo_tensor(i, v, (2, 3)).coalesce()
        facts["coalesce"] = [
            str(c.device),
            torch.equal(c.indices().cpu(), expected.indices()),
            torch.equal(c.values().cpu(), expected.values()),
        ]
        torch.manual_seed(0)
        a, b = torch.randn(5, 4).relu().to_sparse(), torch.randn(4, 3)

        def grads(device):
            sa = a.to(device).detach().requires_grad_()
            db = b.to(device).detach().requires_grad_()
            out = torch.sparse.mm(sa, db)
            out.sum().backward()
            return [out.cpu(), sa.grad.to_dense().cpu(), db.grad.cpu()]

        facts["products"] = all(
            torch.allclose(x, y) for x, y in zip(grads("cpu"), grads("ember"))
        )

        # Optimizers with sparse gradients: equal to the CPU.
        def train(device, make):
            torch.manual_seed(0)
            model = torch.nn.EmbeddingBag(20, 4, mode="sum", sparse=True).to(device)
            optimizer = make(model.parameters())
            generator = torch.Generator().manual_seed(1)
            for _ in range(3):
                indices = torch.randint(0, 20, (12,), generator=generator).to(device)
                offsets = torch.tensor([0, 4, 8], device=device)
                optimizer.zero_grad()
                model(indices, offsets).pow(2).sum().backward()
                optimizer.step()
            return model.weight.detach().cpu()

        makers = {
            "SGD": lambda p: torch.optim.SGD(p, lr=0.1),
            "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
            "SparseAdam": lambda p: torch.optim.SparseAdam(p, lr=0.01),
        }
        facts["optimizers"] = {
            name: torch.equal(train("ember", make), train("cpu", make)) for name, make in makers.items()
        }

        # CSR.
        dense = torch.randn(4, 5).relu()
        csr = dense.to("ember").to_sparse_csr()
        rhs = torch.randn(5, 2)
        facts["csr"] = [
            str(csr.layout),
            str(csr.device),
            torch.equal(csr.crow_indices().cpu(), dense.to_sparse_csr().crow_indices()),
            torch.allclose((csr @ rhs.to("ember")).cpu(), dense @ rhs),
            torch.equal(csr.to_dense().cpu(), dense),
        ]

        # Errors: the CPU's, with ember's key.
        x = torch.tensor([[0.0, 1.5], [-2.0, 0.0]])
        facts["sigmoid"] = [error(lambda: torch.sigmoid(x.to(d).to_sparse())) for d in ("cpu", "ember")]

        # Quantized.
        x = torch.randn(3, 4)
        q = torch.quantize_per_tensor(x.to("ember"), 0.05, 3, torch.qint8)
        q_cpu = torch.quantize_per_tensor(x, 0.05, 3, torch.qint8)
        facts["quantized"] = [
            str(q.device),
            str(q.dtype),
            torch.equal(q.int_repr().cpu(), q_cpu.int_repr()),
            torch.equal(q.dequantize().cpu(), q_cpu.dequantize()),
        ]
        facts["quantized_views"] = {
            name: torch.equal(f(q).int_repr().cpu(), f(q_cpu).int_repr())
            and f(q).stride() == f(q_cpu).stride()
            for name, f in {
                "flip": lambda t: t.flip(0),
                "t": lambda t: t.t(),
                "flatten": lambda t: t.flatten(),
                "index": lambda t: t[1:, ::2],
            }.items()
        }
        facts["exp"] = [error(lambda: torch.exp(t)) for t in (q_cpu, q)]

        from torch.ao.nn.quantized.dynamic import Linear as DynamicLinear

        generator = torch.Generator().manual_seed(1)
        linear = DynamicLinear(40, 24)
        weight = torch.randn(24, 40, generator=generator) * 0.1
        linear.set_weight_bias(
            torch.quantize_per_tensor(weight, 0.002, 0, torch.qint8),
            torch.randn(24, generator=generator),
        )
        inputs = torch.randn(37, 40, generator=generator)
        out = linear(inputs.to("ember"))
        facts["dynamic_linear"] = [str(out.device), torch.equal(out.cpu(), linear(inputs))]
        print(json.dumps(facts))
        """
    )
    facts, _ = child_facts(code, CHILD_TIMEOUT_SECONDS)
    return facts


def test_a_sparse_embedding_gradient_is_a_coo_tensor_on_ember(layouts: dict) -> None:
    assert layouts["grad"] == ["torch.sparse_coo", "ember:0", [[1, 2, 7]]]


def test_coo_coalesce_and_products_equal_the_cpu(layouts: dict) -> None:
    assert layouts["coalesce"] == ["ember:0", True, True]
    assert layouts["products"]


def test_optimizers_with_sparse_gradients_equal_the_cpu(layouts: dict) -> None:
    assert layouts["optimizers"] == {"SGD": True, "Adagrad": True, "SparseAdam": True}


def test_csr_on_ember(layouts: dict) -> None:
    assert layouts["csr"] == ["torch.sparse_csr", "ember:0", True, True, True]


def test_operators_without_a_kernel_raise_the_cpus_error_with_embers_key(layouts: dict) -> None:
    assert layouts["sigmoid"] == [
        "Could not run 'aten::sigmoid' with arguments from the 'SparseCPU' backend",
        "Could not run 'aten::sigmoid' with arguments from the 'Sparseember' backend",
    ]
    cpu, ember = layouts["exp"]
    assert "'QuantizedCPU' backend" in cpu
    assert ember == cpu.replace("QuantizedCPU", "Quantizedember")


def test_quantized_tensors_equal_the_cpu(layouts: dict) -> None:
    assert layouts["quantized"] == ["ember:0", "torch.qint8", True, True]
    assert layouts["quantized_views"] == {"flip": True, "t": True, "flatten": True, "index": True}
    assert layouts["dynamic_linear"] == ["ember:0", True]
