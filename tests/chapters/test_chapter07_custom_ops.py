"""Chapter 07's claims: ember's custom operators, checked on the backend the chapter ends with.

The backend is chapter 07's last build (chapters 01-04's C++ and every %%cpp cell of chapter 07).
The Python custom operators are the package's own module, extension/torch_ember/custom_ops.py,
loaded by path (importing torch_ember would load its compiled backend next to the chapter's); a
test checks that the chapter's cells define the same functions.
"""

from __future__ import annotations

import ast
import gc
import importlib.util
import json
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from types import ModuleType

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import book
from book.builds import builder
from book.display.widgets import table as t
from book.paths import REPO
from book.run.chapter import Chapter

EMBER = "privateuseone"
NOTEBOOK = REPO / "chapters" / "07_custom_ops.ipynb"
CUSTOM_OPS = REPO / "extension" / "torch_ember" / "custom_ops.py"


@pytest.fixture(scope="module", autouse=True)
def backend() -> Iterator[builder.Build]:
    yield Chapter.of("custom_ops").build()
    gc.collect()  # let the next module's build unload this one


@pytest.fixture(scope="module")
def custom_ops(backend: builder.Build) -> ModuleType:
    """The package's Python custom operators, registered once per process."""
    if "ember_custom_ops_under_test" in sys.modules:
        return sys.modules["ember_custom_ops_under_test"]
    spec = importlib.util.spec_from_file_location("ember_custom_ops_under_test", CUSTOM_OPS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def sample(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(5)
    return torch.randn(shape, generator=generator, dtype=dtype)


# ---- ember::custom_abs --------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced", "empty"])
def test_custom_abs_matches_torch_abs_on_cpu_and_ember(dtype: torch.dtype, layout: str) -> None:
    base = sample(0, 3, dtype=dtype) if layout == "empty" else sample(4, 6, dtype=dtype)
    view = {"contiguous": lambda b: b, "transposed": lambda b: b.T, "sliced": lambda b: b[:, ::2]}
    make = view.get(layout, lambda b: b)
    on_cpu = make(base)
    on_ember = make(base.to(EMBER))
    assert torch.equal(torch.ops.ember.custom_abs(on_cpu), on_cpu.abs())
    result = torch.ops.ember.custom_abs(on_ember)
    assert result.device == torch.device(EMBER, 0)
    assert result.dtype == dtype and result.is_contiguous()
    assert torch.equal(result.cpu(), on_cpu.abs())


def test_custom_abs_runs_one_launch_and_copies_nothing() -> None:
    x = sample(8).to(EMBER)
    trace = book.trace(lambda: torch.ops.ember.custom_abs(x))
    kinds = [event.kind for event in trace.all_events()]
    assert kinds.count("launch") == 1
    assert "memcpy" not in kinds


def test_strided_input_redispatches_without_a_second_operator_call() -> None:
    x = sample(3, 4).to(EMBER)
    trace = book.trace(lambda: torch.ops.ember.custom_abs(x.T))
    names = [call.name for call in trace.walk()]
    assert names.count("ember::custom_abs") == 1  # the redispatch records no event
    assert "aten::contiguous" in names
    assert sum(event.kind == "launch" for event in trace.all_events()) == 1


@pytest.mark.parametrize("device", ["cpu", EMBER])
@pytest.mark.parametrize("dtype", [torch.int64, torch.float16, torch.bool])
def test_custom_abs_refuses_other_dtypes_naming_op_and_device(device: str, dtype: torch.dtype) -> None:
    x = torch.ones(3, dtype=dtype).to(device)
    expected = re.escape("ember::custom_abs: expected a float32 or float64 tensor, got ")
    with pytest.raises(RuntimeError, match=expected + r"\w+ on " + re.escape(str(x.device))):
        torch.ops.ember.custom_abs(x)


def test_fake_tensor_mode_uses_the_meta_kernel() -> None:
    assert "07_custom_ops.ipynb[custom_abs_meta]" in t.entry("ember::custom_abs", "Meta").location
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(sample(2, 5).to(EMBER))
        out = torch.ops.ember.custom_abs(fake)
    assert (out.shape, out.dtype, out.device) == (torch.Size([2, 5]), torch.float32, torch.device(EMBER, 0))


@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_in_one_graph_with_the_op_as_one_node(dynamic: bool) -> None:
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    torch._dynamo.reset()
    recorded = AotEagerAndRecordGraphs()

    def fn(t: torch.Tensor) -> torch.Tensor:
        return torch.ops.ember.custom_abs(t) * 2

    compiled = torch.compile(fn, backend=recorded, fullgraph=True, dynamic=dynamic)
    for n in (4, 7):
        x = sample(n)
        assert torch.equal(compiled(x.to(EMBER)).cpu(), fn(x))
    code = recorded.fw_graphs[-1].code
    assert code.count("torch.ops.ember.custom_abs.default(") == 1


# opcheck's verdicts depend on the process: once another test module in the same pytest worker
# has named the backend and attached the device module (chapters 08+), its autograd check asks
# for a generator chapter 07's build does not have. A fresh process holds chapter 07's state.
OPCHECK_CHILD = textwrap.dedent(
    """
    import importlib.util, json, sys, warnings
    import torch
    from book.run.chapter import Chapter

    Chapter.of("custom_ops").build()
    spec = importlib.util.spec_from_file_location("ember_custom_ops_under_test", sys.argv[1])
    custom_ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(custom_ops)

    def verdicts(op, args):
        checks = torch.library.opcheck(op, args, raise_exception=False)
        return {name: v if v == "SUCCESS" else f"{type(v).__name__}: {v}" for name, v in checks.items()}

    E = "privateuseone"
    op = torch.ops.ember.custom_abs.default
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backward through an op without an autograd kernel warns
        on_cpu = verdicts(op, (x.clone().requires_grad_(),))
    s = torch.tensor([-1.5, 2.0, -0.25, 0.75], device=E)
    print(json.dumps({
        "cpu": on_cpu,
        "ember": verdicts(op, (x.to(E),)),
        "ember_grad": verdicts(op, (x.to(E).requires_grad_(),)),
        "soft_shrink": verdicts(custom_ops.soft_shrink, (s.clone(), 0.5)),
        "soft_shrink_": verdicts(custom_ops.soft_shrink_, (s.clone(), 0.5)),
    }))
    """
)


@pytest.fixture(scope="module")
def opcheck_in_a_fresh_process() -> dict[str, dict[str, str]]:
    child = subprocess.run(
        [sys.executable, "-c", OPCHECK_CHILD, str(CUSTOM_OPS)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert child.returncode == 0, child.stdout + child.stderr
    return json.loads(child.stdout.splitlines()[-1])


def test_opcheck_passes_on_cpu_and_on_ember_as_far_as_213_allows(
    opcheck_in_a_fresh_process: dict[str, dict[str, str]],
) -> None:
    verdicts = opcheck_in_a_fresh_process
    assert set(verdicts["cpu"].values()) == {"SUCCESS"}
    assert set(verdicts["ember"].values()) == {"SUCCESS"}
    with_grad = verdicts["ember_grad"]
    assert with_grad["test_schema"] == with_grad["test_faketensor"] == "SUCCESS"
    registration = with_grad["test_autograd_registration"]
    assert registration.startswith("NotImplementedError")
    assert "NYI devices other than CPU/CUDA/XPU" in registration
    # Backward on ember needs a registered backend name (chapter 08); chapter 07's process has none.
    assert "Cannot access accelerator device" in with_grad["test_aot_dispatch_dynamic"]


# ---- ember::custom_l1_loss: a composite calling through a cached handle --------------------------


def test_custom_l1_loss_calls_custom_abs_through_the_dispatcher() -> None:
    a, b = sample(2, 3), sample(2, 3) * 2
    result = torch.ops.ember.custom_l1_loss(a.to(EMBER), b.to(EMBER))
    assert torch.allclose(result.cpu(), (a - b).abs().mean())
    ea, eb = a.to(EMBER), b.to(EMBER)
    names = [call.name for call in book.trace(lambda: torch.ops.ember.custom_l1_loss(ea, eb)).walk()]
    assert names[0] == "ember::custom_l1_loss" and "ember::custom_abs" in names
    assert t.entry("ember::custom_l1_loss", "PrivateUse1").alias == t.CIA


@pytest.mark.parametrize("other", ["cpu", f"{EMBER}:1"])
def test_custom_l1_loss_refuses_two_devices(other: str) -> None:
    a = sample(3)
    expected = (
        f"ember::custom_l1_loss: self is on {EMBER}:0 and target on {other}; both must be on the same device"
    )
    with pytest.raises(RuntimeError, match=re.escape(expected)):
        torch.ops.ember.custom_l1_loss(a.to(EMBER), a.to(other))


# ---- Python custom operators (the package's module) ---------------------------------------------


def test_soft_shrink_on_ember_equals_cpu_and_has_a_gradient_formula(custom_ops: ModuleType) -> None:
    x = torch.tensor([-1.5, 2.0, -0.25, 0.75, 0.5])
    expected = torch.nn.functional.softshrink(x, 0.5)
    assert torch.equal(custom_ops.soft_shrink(x.to(EMBER), 0.5).cpu(), expected)
    leaf = x.clone().requires_grad_()
    custom_ops.soft_shrink(leaf, 0.5).sum().backward()
    assert torch.equal(leaf.grad, (x.abs() > 0.5).float())
    on_ember = custom_ops.soft_shrink(x.to(EMBER).requires_grad_(), 0.5)
    assert "ember_soft_shrink" in type(on_ember.grad_fn).__name__


def test_soft_shrink_inplace_mutates_and_is_functionalized(custom_ops: ModuleType) -> None:
    from torch._dynamo.testing import AotEagerAndRecordGraphs

    x = torch.tensor([-1.0, 2.0, -3.0, 0.25])
    z = x.to(EMBER)
    custom_ops.soft_shrink_(z, 0.5)
    assert torch.equal(z.cpu(), torch.nn.functional.softshrink(x, 0.5))
    torch._dynamo.reset()
    recorded = AotEagerAndRecordGraphs()
    z = x.to(EMBER)
    torch.compile(custom_ops.soft_shrink_, backend=recorded, fullgraph=True)(z, 0.5)
    assert torch.equal(z.cpu(), torch.nn.functional.softshrink(x, 0.5))
    assert "auto_functionalized" in recorded.fw_graphs[0].code
    assert t.entry("ember::soft_shrink_", "ADInplaceOrView").kind == t.KERNEL


def test_python_ops_pass_opcheck_on_ember(
    opcheck_in_a_fresh_process: dict[str, dict[str, str]],
) -> None:
    for op in ("soft_shrink", "soft_shrink_"):
        assert set(opcheck_in_a_fresh_process[op].values()) == {"SUCCESS"}, op


def _defs(source: str) -> dict[str, str]:
    """Top-level function name -> its arguments and body as an AST dump (decorators and docstring left out).

    The chapter wraps docstrings at the page's 88 columns, the package need not: the code must be the same.
    """
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef):
            body = node.body[1:] if ast.get_docstring(node) is not None else node.body
            found[node.name] = ast.dump(ast.Module(body=[*body], type_ignores=[])) + ast.dump(node.args)
    return found


def test_chapter_cells_define_the_package_functions() -> None:
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    notebook = {}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and not source.startswith("%%"):
            notebook.update(_defs(source))
    package = _defs(CUSTOM_OPS.read_text())
    assert set(package) <= set(notebook)
    for name, body in package.items():
        assert notebook[name] == body, f"chapter 07's {name} differs from torch_ember/custom_ops.py"


# ---- the dispatcher's rules the chapter states ----------------------------------------------------


def test_a_library_takes_its_registrations_with_it() -> None:
    def register() -> torch.library.Library:
        lib = torch.library.Library("ember_test_scratch", "DEF")
        lib.define("twice(Tensor self) -> Tensor")
        lib.impl("twice", lambda x: x * 2, "CPU")
        return lib

    lib = register()
    assert torch.equal(torch.ops.ember_test_scratch.twice(torch.ones(2)), torch.full((2,), 2.0))
    del lib
    gc.collect()
    assert "ember_test_scratch::twice" not in torch._C._dispatch_get_all_op_names()


def test_overriding_an_aten_kernel_warns_once_and_the_newest_wins() -> None:
    code = textwrap.dedent(
        """
        import gc, warnings
        import torch
        x = torch.tensor([1.0, -2.0])
        lib = torch.library.Library("aten", "IMPL")
        def register(op, value):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                lib.impl(op, lambda t: torch.full_like(t, value), "CPU")
            return len(caught), str(caught[0].message) if caught else ""
        first, text = register("neg", 1.0)
        print(first, "Overriding a previously registered kernel" in text, torch.neg(x).tolist())
        print(register("neg", 2.0)[0], torch.neg(x).tolist())
        print(register("abs", 3.0)[0], torch.abs(x).tolist())
        del lib
        gc.collect()
        print(torch.neg(x).tolist())
        """
    )
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert child.stdout.splitlines() == [
        "1 True [1.0, 1.0]",
        "0 [2.0, 2.0]",  # TORCH_WARN_ONCE: one warning per process
        "0 [3.0, 3.0]",  # abs has no CPU kernel to override (CompositeExplicitAutograd serves CPU)
        "[-1.0, 2.0]",
    ]


def test_snapshot_counts_operators_that_do_not_exist_yet_as_empty() -> None:
    snap = t.snapshot(["aten::abs", "ember_not_yet::op", "ember_not_yet::*"])
    assert "ember_not_yet::op" in snap
    assert snap.entry("ember_not_yet::op", "CPU") == t.NONE_ENTRY
    with pytest.raises(ValueError, match="not an operator"):
        t.expand(["ember_not_yet::op"])


def test_table_shows_ember_ops_next_to_aten_with_ours_marked() -> None:
    data = t.table_data(["aten::abs", "ember::*"])
    assert data.ops[0] == "aten::abs" and {"ember::custom_abs", "ember::custom_l1_loss"} <= set(data.ops)
    for key in ("PrivateUse1", "CPU", "Meta"):
        assert data.cell("ember::custom_abs", key).entry.ours
    assert not data.cell("aten::abs", "PrivateUse1").entry.ours
    assert t.normalize_location("registered at /tmp/ipykernel_42/123.py:7") == t.NOTEBOOK_CELL + ":7"
    assert t.Entry(t.KERNEL, None, t.NOTEBOOK_CELL + ":7").ours
