"""Sparse tensors on ember (csrc/sparse/): COO and CSR, against the CPU.

Every result is compared with the same computation on the CPU: values, layout, and the device of
the result and of its members (indices and values must live on ember, never silently on the CPU).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import warnings

import pytest
import torch

EMBER = torch.device("ember:0")

# The CPU warns once per process that CSR support is in beta; that is not what is tested here.
pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta state"),
    pytest.mark.filterwarnings("ignore:Sparse invariant checks are implicitly disabled"),
]


def dense_matrix(rows: int = 5, cols: int = 4, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=generator, dtype=torch.float64)
    x[x.abs() < 0.6] = 0
    return x


def uncoalesced() -> torch.Tensor:
    """A 3x4 COO tensor with a duplicate index (0, 1) and indices out of order."""
    indices = torch.tensor([[2, 0, 0, 1], [3, 1, 1, 0]])
    values = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    return torch.sparse_coo_tensor(indices, values, (3, 4))


def assert_on_ember(t: torch.Tensor) -> None:
    """The tensor and every member it holds are on ember."""
    assert t.device == EMBER
    if t.layout == torch.sparse_coo:
        assert t._indices().device == EMBER and t._values().device == EMBER
    elif t.layout == torch.sparse_csr:
        members = (t.crow_indices(), t.col_indices(), t.values())
        assert all(m.device == EMBER for m in members)


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same layout and values as the CPU's result; on ember, members included."""
    assert actual.layout == expected.layout
    assert_on_ember(actual)
    if actual.layout == torch.sparse_coo:
        assert actual.is_coalesced() == expected.is_coalesced()
        torch.testing.assert_close(actual._indices().cpu(), expected._indices())
        torch.testing.assert_close(actual._values().cpu(), expected._values())
    elif actual.layout == torch.sparse_csr:
        torch.testing.assert_close(actual.crow_indices().cpu(), expected.crow_indices())
        torch.testing.assert_close(actual.col_indices().cpu(), expected.col_indices())
        torch.testing.assert_close(actual.values().cpu(), expected.values())
    else:
        torch.testing.assert_close(actual.cpu(), expected)


# -- COO: construction, members, conversions ---------------------------------------------------


def test_sparse_coo_tensor_from_ember_members() -> None:
    indices = torch.tensor([[0, 1, 1], [2, 0, 2]])
    values = torch.tensor([3.0, 4.0, 5.0])
    expected = torch.sparse_coo_tensor(indices, values, (2, 3))
    actual = torch.sparse_coo_tensor(indices.to(EMBER), values.to(EMBER), (2, 3))
    assert actual.is_sparse and actual.layout == torch.sparse_coo
    assert_same(actual, expected)
    assert actual._nnz() == 3 and actual.sparse_dim() == 2 and actual.dense_dim() == 0
    torch.testing.assert_close(actual.to_dense().cpu(), expected.to_dense())


def test_members_on_two_devices_are_refused_as_on_cuda() -> None:
    # PyTorch's own check (the constructor's): CUDA's values get "(CUDA)" in its place.
    with pytest.raises(
        RuntimeError, match=r"^backend of indices \(CPU\) must match backend of values \(PrivateUseOne\)$"
    ):
        torch.sparse_coo_tensor(torch.tensor([[0], [1]]), torch.tensor([1.0], device=EMBER), (2, 2))


def test_to_ember_and_back_keeps_layout_values_and_flags() -> None:
    for cpu in (dense_matrix().to_sparse(), uncoalesced()):
        ember = cpu.to(EMBER)
        assert_same(ember, cpu)
        back = ember.cpu()
        assert back.device.type == "cpu" and back.layout == torch.sparse_coo
        assert back.is_coalesced() == cpu.is_coalesced()
        torch.testing.assert_close(back.to_dense(), cpu.to_dense())


def test_dense_to_sparse_and_to_dense() -> None:
    x = dense_matrix()
    assert_same(x.to(EMBER).to_sparse(), x.to_sparse())
    assert_same(x.to(EMBER).to_sparse(1), x.to_sparse(1))
    assert_same(x.to(EMBER).to_sparse().to_dense(), x)
    assert_same(x.to_sparse().to(EMBER).to_dense(), x)


def test_coalesce_sums_duplicates_as_the_cpu_does() -> None:
    cpu = uncoalesced()
    ember = cpu.to(EMBER)
    assert not ember.is_coalesced() and ember._nnz() == 4
    assert_same(ember.coalesce(), cpu.coalesce())
    assert ember.coalesce().is_coalesced() and ember.coalesce()._nnz() == 3
    assert_same(ember.coalesce().indices(), cpu.coalesce().indices())
    assert_same(ember.coalesce().values(), cpu.coalesce().values())


def test_members_are_the_tensors_themselves() -> None:
    # _values() is the member, not a copy: writing through it changes the sparse tensor, as on the CPU.
    ember = dense_matrix().to_sparse().to(EMBER)
    ember._values().mul_(2)
    assert_same(ember.to_dense(), 2 * dense_matrix())


def test_empty_and_zeros_with_a_sparse_layout() -> None:
    assert_same(
        torch.empty(2, 3, layout=torch.sparse_coo, device=EMBER), torch.empty(2, 3, layout=torch.sparse_coo)
    )
    assert_same(
        torch.zeros(2, 3, layout=torch.sparse_coo, device=EMBER), torch.zeros(2, 3, layout=torch.sparse_coo)
    )
    assert_same(torch.zeros_like(uncoalesced().to(EMBER)), torch.zeros_like(uncoalesced()))


# -- COO: arithmetic and reductions -----------------------------------------------------------


COO_OPS = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul_scalar": lambda a, b: a * 2.5,
    "scalar_mul": lambda a, b: 3 * a,
    "div_scalar": lambda a, b: a / 4,
    "mul": lambda a, b: a * b,
    "neg": lambda a, b: -a,
    "pow": lambda a, b: a.pow(2),
    "abs": lambda a, b: a.abs(),
    "sqrt_of_abs": lambda a, b: a.abs().sqrt(),
    "t": lambda a, b: a.t(),
    "transpose": lambda a, b: a.transpose(0, 1),
    "sum": lambda a, b: torch.sparse.sum(a),
    "sum_dim0": lambda a, b: torch.sparse.sum(a, dim=0),
    "sum_dim1": lambda a, b: torch.sparse.sum(a, dim=1),
    "softmax": lambda a, b: torch.sparse.softmax(a, 1),
    "log_softmax": lambda a, b: torch.sparse.log_softmax(a, 0),
    "dense_add_sparse": lambda a, b: a.to_dense() + b,
    "sparse_mask": lambda a, b: a.to_dense().sparse_mask(b.coalesce()),
    "index_select": lambda a, b: a.index_select(0, torch.tensor([2, 0], device=a.device)),
    "coalesce_uncoalesced": lambda a, b: (a + uncoalesced().to(a.device)).coalesce(),
}


@pytest.mark.parametrize("name", COO_OPS)
def test_coo_arithmetic_matches_cpu(name: str) -> None:
    a, b = dense_matrix(3, 4, seed=1).to_sparse(), dense_matrix(3, 4, seed=2).to_sparse()
    expected = COO_OPS[name](a, b)
    actual = COO_OPS[name](a.to(EMBER), b.to(EMBER))
    assert_same(actual, expected)


def test_in_place_arithmetic_on_a_sparse_tensor() -> None:
    a, b = dense_matrix(3, 4, seed=1).to_sparse(), dense_matrix(3, 4, seed=2).to_sparse()
    ember = a.to(EMBER)
    members = ember._values()
    ember.add_(b.to(EMBER)).mul_(2)
    assert_same(ember, a.add_(b).mul_(2))
    assert members.device == EMBER  # the member replaced, not moved to the CPU


@pytest.mark.parametrize("reduction", ["sum", "softmax", "log_softmax"])
def test_coo_reduction_gradients(reduction: str) -> None:
    def run(device: torch.device | str) -> torch.Tensor:
        x = dense_matrix(4, 3, seed=3).to_sparse().to(device).requires_grad_()
        if reduction == "sum":
            y = torch.sparse.sum(x, dim=1)
            y.to_dense().pow(2).sum().backward()
        else:
            y = getattr(torch.sparse, reduction)(x, 1)
            (y * y).to_dense().sum().backward()
        return x.grad

    assert_same(run(EMBER), run("cpu"))


# -- COO: products and their gradients -------------------------------------------------------


PRODUCTS = {
    "mm": lambda s, d, t: torch.mm(s, d),
    "matmul": lambda s, d, t: s @ d,
    "sparse.mm": lambda s, d, t: torch.sparse.mm(s, d),
    "addmm": lambda s, d, t: torch.addmm(t, s, d, beta=0.5, alpha=2.0),
    "sparse.addmm": lambda s, d, t: torch.sparse.addmm(t, s, d),
}


@pytest.mark.parametrize("name", PRODUCTS)
def test_sparse_dense_products_with_gradients(name: str) -> None:
    def run(device: torch.device | str) -> tuple[torch.Tensor, ...]:
        s = dense_matrix(5, 4, seed=4).to_sparse().to(device).requires_grad_()
        d = dense_matrix(4, 3, seed=5).to(device).requires_grad_()
        t = dense_matrix(5, 3, seed=6).to(device).requires_grad_()
        out = PRODUCTS[name](s, d, t)
        out.pow(2).sum().backward()
        grads = (s.grad, d.grad) + ((t.grad,) if t.grad is not None else ())
        return (out.detach(), *grads)

    for actual, expected in zip(run(EMBER), run("cpu"), strict=True):
        assert_same(actual, expected)


def test_mm_out_and_addmm_in_place() -> None:
    s, d = dense_matrix(5, 4, seed=4).to_sparse(), dense_matrix(4, 3, seed=5)
    out = torch.empty(5, 3, dtype=torch.float64, device=EMBER)
    torch.mm(s.to(EMBER), d.to(EMBER), out=out)
    assert_same(out, s @ d)
    t = torch.ones(5, 3, dtype=torch.float64)
    ember_t = t.to(EMBER)
    ember_t.addmm_(s.to(EMBER), d.to(EMBER))
    assert_same(ember_t, t.addmm_(s, d))


# -- COO: sparse gradients and optimizers -------------------------------------------------------


def embedding_grads(module: torch.nn.Module, device: torch.device | str, bag: bool) -> torch.Tensor:
    module = module.to(device)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9], device=device)
    if bag:
        out = module(indices, torch.tensor([0, 3, 5], device=device))
    else:
        out = module(indices)
    (out * out).sum().backward()
    return module.weight.grad


@pytest.mark.parametrize("kind", ["embedding", "embedding_bag_sum", "embedding_bag_mean"])
def test_sparse_embedding_gradients(kind: str) -> None:
    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        if kind == "embedding":
            return torch.nn.Embedding(10, 4, sparse=True)
        return torch.nn.EmbeddingBag(10, 4, mode=kind.rsplit("_", 1)[1], sparse=True)

    actual = embedding_grads(make(), EMBER, bag=kind != "embedding")
    expected = embedding_grads(make(), "cpu", bag=kind != "embedding")
    assert actual.layout == torch.sparse_coo
    assert_same(actual, expected)


OPTIMIZERS = {
    "SGD": lambda params: torch.optim.SGD(params, lr=0.1),
    "Adagrad": lambda params: torch.optim.Adagrad(params, lr=0.1),
    "SparseAdam": lambda params: torch.optim.SparseAdam(params, lr=0.01),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_optimizers_step_with_sparse_gradients(name: str) -> None:
    def train(device: torch.device | str) -> torch.Tensor:
        torch.manual_seed(0)
        model = torch.nn.EmbeddingBag(20, 4, mode="sum", sparse=True).to(device)
        optimizer = OPTIMIZERS[name](model.parameters())
        generator = torch.Generator().manual_seed(1)
        for _ in range(3):
            indices = torch.randint(0, 20, (12,), generator=generator).to(device)
            offsets = torch.tensor([0, 4, 8], device=device)
            optimizer.zero_grad()
            model(indices, offsets).pow(2).sum().backward()
            optimizer.step()
        return model.weight.detach()

    assert_same(train(EMBER), train("cpu"))


def test_gather_with_sparse_grad() -> None:
    def run(device: torch.device | str) -> torch.Tensor:
        x = dense_matrix(4, 5, seed=7).to(device).requires_grad_()
        index = torch.tensor([[0, 1], [2, 2], [4, 0], [1, 3]], device=device)
        torch.gather(x, 1, index, sparse_grad=True).pow(2).sum().backward()
        return x.grad

    actual = run(EMBER)
    assert actual.layout == torch.sparse_coo
    assert_same(actual, run("cpu"))


def test_save_and_load_keep_layout_and_device() -> None:
    for cpu in (uncoalesced(), dense_matrix().to_sparse_csr()):
        buffer = io.BytesIO()
        torch.save(cpu.to(EMBER), buffer)
        buffer.seek(0)
        loaded = torch.load(buffer)
        assert loaded.layout == cpu.layout
        assert_same(loaded, cpu)


# -- CSR --------------------------------------------------------------------------------------


def test_csr_construction_members_and_to_dense() -> None:
    x = dense_matrix()
    expected = x.to_sparse_csr()
    assert_same(x.to(EMBER).to_sparse_csr(), expected)
    assert_same(expected.to(EMBER), expected)
    assert_same(x.to_sparse().to(EMBER).to_sparse_csr(), expected)
    actual = torch.sparse_csr_tensor(
        expected.crow_indices().to(EMBER),
        expected.col_indices().to(EMBER),
        expected.values().to(EMBER),
        x.shape,
    )
    assert_same(actual, expected)
    assert actual._nnz() == expected._nnz()
    assert_same(actual.to_dense(), x)
    assert_same(actual.to_sparse(), expected.to_sparse())
    back = actual.cpu()
    assert back.layout == torch.sparse_csr and back.device.type == "cpu"
    torch.testing.assert_close(back.to_dense(), x)


def test_csr_matrix_products() -> None:
    csr, d = dense_matrix(5, 4, seed=8).to_sparse_csr(), dense_matrix(4, 3, seed=9)
    assert_same(csr.to(EMBER) @ d.to(EMBER), csr @ d)
    t = dense_matrix(5, 3, seed=10)
    assert_same(torch.addmm(t.to(EMBER), csr.to(EMBER), d.to(EMBER)), torch.addmm(t, csr, d))


def test_csr_sampled_addmm() -> None:
    mask = dense_matrix(5, 3, seed=11).to_sparse_csr()
    a, b = dense_matrix(5, 4, seed=12), dense_matrix(4, 3, seed=13)
    expected = torch.sparse.sampled_addmm(mask, a, b, beta=0.5, alpha=2.0)
    actual = torch.sparse.sampled_addmm(mask.to(EMBER), a.to(EMBER), b.to(EMBER), beta=0.5, alpha=2.0)
    assert_same(actual, expected)


@pytest.mark.parametrize("reduce", ["sum", "mean", "amax", "amin"])
def test_csr_reduced_mm_with_gradients(reduce: str) -> None:
    def run(device: torch.device | str) -> tuple[torch.Tensor, ...]:
        csr = dense_matrix(5, 4, seed=14).to_sparse_csr().to(device).requires_grad_()
        d = dense_matrix(4, 3, seed=15).to(device).requires_grad_()
        out = torch.sparse.mm(csr, d, reduce)
        out.pow(2).sum().backward()
        return out.detach(), csr.grad, d.grad

    for got, want in zip(run(EMBER), run("cpu"), strict=True):
        assert_same(got, want)


# -- errors -----------------------------------------------------------------------------------


def first_sentence(error: BaseException) -> str:
    return str(error).split(". ")[0]


@pytest.mark.parametrize("make", [lambda x: x.to_sparse()], ids=["coo"])
def test_operator_without_a_sparse_kernel_raises_as_on_the_cpu(make) -> None:
    x = dense_matrix()
    with pytest.raises(NotImplementedError) as on_cpu:
        torch.sigmoid(make(x))
    with pytest.raises(NotImplementedError) as on_ember:
        torch.sigmoid(make(x.to(EMBER)))
    assert (
        first_sentence(on_cpu.value)
        == "Could not run 'aten::sigmoid' with arguments from the 'SparseCPU' backend"
    )
    assert first_sentence(on_ember.value) == first_sentence(on_cpu.value).replace("SparseCPU", "Sparseember")


def test_csr_operator_without_a_kernel_raises_as_on_the_cpu() -> None:
    x = dense_matrix()
    with pytest.raises(Exception) as on_cpu:
        torch.sigmoid(x.to_sparse_csr())
    with pytest.raises(Exception) as on_ember:
        torch.sigmoid(x.to(EMBER).to_sparse_csr())
    assert type(on_ember.value) is type(on_cpu.value)
    assert str(on_ember.value).replace("SparseCsrember", "SparseCsrCPU") == str(on_cpu.value)


def test_sparse_tensors_on_the_second_device() -> None:
    # ember:1 while ember:0 is current: members and results stay on ember:1.
    x = dense_matrix()
    for ember in (x.to_sparse().to("ember:1"), x.to("ember:1").to_sparse(), x.to("ember:1").to_sparse_csr()):
        members = (
            [ember._indices(), ember._values()] if ember.is_sparse else [ember.crow_indices(), ember.values()]
        )
        assert ember.device == torch.device("ember:1")
        assert all(m.device == torch.device("ember:1") for m in members)
        assert (ember @ x.t().to("ember:1")).device == torch.device("ember:1")
        assert (ember * 2).device == torch.device("ember:1")
        torch.testing.assert_close(ember.to_dense().cpu(), x)


def test_sparse_tensors_on_two_devices_are_refused() -> None:
    s = dense_matrix().to_sparse()
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        s.to(EMBER) + s
    with pytest.raises(RuntimeError, match=r"Expected all tensors to be on the same device"):
        s.to("ember:0") + s.to("ember:1")


# -- the CPU's sparse tensors are untouched -----------------------------------------------------

CPU_PROGRAM = """
import torch, warnings
warnings.simplefilter("ignore")
torch.manual_seed(0)
x = torch.randn(6, 5, dtype=torch.float64)
x[x.abs() < 0.6] = 0
s = x.to_sparse()
e = torch.nn.Embedding(7, 3, sparse=True)
e(torch.tensor([1, 2, 1])).sum().backward()
results = [s + s, s * 2, s.t(), torch.sparse.sum(s, 0), torch.sparse.softmax(s, 1), s @ x.t(),
           x.to_sparse_csr() @ x.t(), e.weight.grad, s.coalesce()]
for r in results:
    print(r.layout, r.device, r.to_dense().sum().item())
try:
    torch.sigmoid(s)
except NotImplementedError as error:
    print(str(error).split(". ")[0])
print(torch._C._dispatch_dump("aten::add.Tensor").count("SparseCPU"))
"""


def test_importing_torch_ember_changes_nothing_for_the_cpu() -> None:
    def run(autoload: str) -> str:
        env = {**os.environ, "TORCH_DEVICE_BACKEND_AUTOLOAD": autoload}
        done = subprocess.run(
            [sys.executable, "-c", CPU_PROGRAM], capture_output=True, text=True, timeout=300, env=env
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    with warnings.catch_warnings():
        without, with_ember = run("0"), run("1")
    assert "SparseCPU" in without
    assert with_ember == without
