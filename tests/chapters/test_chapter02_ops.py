"""Chapter 02's claims: with the minimal operators, ember tensors are real tensors.

The backend under test is the one chapter 02 ends with (`Chapter.of("minimal_ops").build()`: chapter
01's C++ and chapter 02's own %%cpp cells, read from the notebooks, with the Python state
the chapters carry forward). The last tests rebuild: the exercise parts, and the chapter
step by step.
"""

from __future__ import annotations

import cmath
import copy
import gc
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

import book
from book.builds import builder
from book.builds import driver as ember_driver
from book.builds.compile_errors import CppBuildError
from book.parts.cells import CppPart
from book.run.chapter import Chapter

CHAPTER02_PARTS = (
    "empty_memory_format",
    "empty_strided",
    "copy_from",
    "view_kernels",
    "local_scalar_dense",
    "resize",
    "set_storage",
    "copy_from_and_resize",
    "shallow_copy_type",
    "sparse_factories",
)
EMBER = "privateuseone"
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
]
SHAPES = [(), (0,), (2, 0, 3), (7,), (3, 4, 5)]


CHAPTER = Chapter.of("minimal_ops")


@pytest.fixture(scope="module", autouse=True)
def chapter02_backend() -> Iterator[None]:
    CHAPTER.build()
    yield
    gc.collect()  # let the next module's build retire this one


def own_parts() -> list[CppPart]:
    """The chapter's own parts, in cell order (exercise parts left out)."""
    return [part for part in CHAPTER.parts() if not part.is_exercise]


def test_the_chapter_builds_its_parts_in_this_order() -> None:
    assert [part.name for part in own_parts()] == list(CHAPTER02_PARTS)
    assert set(CHAPTER.exercises()) == {"exercise_wrong_dtype", "exercise_fill"}


@pytest.fixture(autouse=True)
def no_device_memory_left() -> Iterator[None]:
    """Every test gives back all the ember memory it allocated."""
    before = builder.live_device_allocations()
    yield
    if builder.live_device_allocations() != before:
        gc.collect()  # slow with torch loaded: only when reference counting was not enough
    assert builder.live_device_allocations() == before


def sample(dtype: torch.dtype, shape: tuple[int, ...], seed: int = 0) -> torch.Tensor:
    """Random bit patterns (NaN payloads, subnormals, -0.0 included); 0/1 for bool."""
    generator = torch.Generator().manual_seed(seed)
    numel = 1
    for size in shape:
        numel *= size
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    itemsize = torch.empty((), dtype=dtype).element_size()
    raw = torch.randint(0, 256, (numel * itemsize,), generator=generator, dtype=torch.uint8)
    return raw.view(dtype).reshape(shape)


def bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as bytes, in logical order: equal bits <=> equal bytes."""
    return t.reshape(-1).contiguous().view(torch.uint8)


def assert_bit_exact(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "cpu"
    assert actual.dtype == expected.dtype
    assert actual.shape == expected.shape
    assert torch.equal(bits(actual), bits(expected))


# -- Round trips: CPU -> ember -> CPU, bit for bit ------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_is_bit_exact(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    src = sample(dtype, shape)
    on_device = src.to(EMBER)
    assert on_device.device == torch.device(EMBER, 0)
    assert on_device.shape == src.shape and on_device.dtype == dtype
    assert_bit_exact(on_device.cpu(), src)


LAYOUTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "transposed": lambda t: t.view(4, 6).t(),
    "sliced_with_step": lambda t: t.view(4, 6)[::2, 1::2],
    "permuted": lambda t: t.view(2, 3, 4).permute(2, 0, 1),
    "offset_view": lambda t: t[5:17],
    "expanded": lambda t: t[:4].view(4, 1).expand(4, 3),
}
DENSE_LAYOUTS = {"transposed", "permuted", "offset_view"}  # no gaps, no overlap


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_round_trip_of_strided_tensors(dtype: torch.dtype, layout: str) -> None:
    src = LAYOUTS[layout](sample(dtype, (24,), seed=1))
    on_device = src.to(EMBER)
    if layout in DENSE_LAYOUTS:
        assert on_device.stride() == src.stride()  # .to() preserves dense layouts
    assert_bit_exact(on_device.cpu(), src)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_views_of_device_tensors_copy_back(layout: str) -> None:
    src = sample(torch.float32, (24,), seed=2)
    view = LAYOUTS[layout](src.to(EMBER))
    assert_bit_exact(view.cpu(), LAYOUTS[layout](src))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dtype_conversion_matches_cpu(dtype: torch.dtype) -> None:
    src = torch.randn(5, 3, generator=torch.Generator().manual_seed(3)).mul(50)
    assert_bit_exact(src.to(EMBER, dtype=dtype).cpu(), src.to(dtype))  # during the upload
    assert_bit_exact(src.to(EMBER).to(dtype).cpu(), src.to(dtype))  # on the device
    assert_bit_exact(src.to(EMBER).t().to(dtype).cpu(), src.t().to(dtype))


def test_conjugate_and_negative_views_are_resolved_by_copies() -> None:
    src = sample(torch.complex64, (3, 4), seed=6)
    on_device = src.to(EMBER)
    conjugated = src.conj().resolve_conj()
    assert_bit_exact(on_device.conj().cpu(), conjugated)
    assert_bit_exact(src.conj().to(EMBER).cpu(), conjugated)
    assert_bit_exact(on_device.conj().t().to(f"{EMBER}:1").cpu(), conjugated.t())
    assert_bit_exact(torch._neg_view(on_device).cpu(), torch._neg_view(src).resolve_neg())
    into_device = torch.empty(3, 4, dtype=torch.complex64, device=EMBER)
    into_device.conj().copy_(src)  # writing through a conjugate view stores conj(src)
    assert_bit_exact(into_device.cpu(), conjugated)
    assert on_device.conj()[1, 2].item() == complex(conjugated[1, 2].item())


def test_copy_into_device_views_keeps_the_gaps() -> None:
    base = torch.arange(24.0).view(4, 6)
    on_device = base.to(EMBER)
    on_device[:, 2].copy_(torch.full((4,), -1.0))  # strided destination
    on_device[1].copy_(torch.full((6,), -2.0))  # contiguous destination
    on_device[2:, ::3].copy_(torch.tensor(-3.0))  # broadcast source
    expected = base.clone()
    expected[:, 2] = -1.0
    expected[1] = -2.0
    expected[2:, ::3] = -3.0
    assert_bit_exact(on_device.cpu(), expected)


def test_copy_with_partial_overlap_is_refused_like_on_cpu() -> None:
    on_device = torch.arange(6).to(EMBER)
    with pytest.raises(
        RuntimeError, match="some elements of the input tensor and the written-to tensor refer"
    ):
        on_device[1:].copy_(on_device[:-1])
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor refers"):
        torch.zeros(1).to(EMBER).expand(3).copy_(torch.arange(3.0))


# -- Views ---------------------------------------------------------------------------------


def test_views_share_storage_and_copy_nothing() -> None:
    x = torch.arange(12).to(EMBER)
    allocations = ember_driver.stats(0).total_allocations
    views = [x.view(3, 4), x.view(3, 4).t(), x[1::3], x.reshape(4, 3), x.as_strided((2, 2), (1, 4), 1), x[5]]
    assert ember_driver.stats(0).total_allocations == allocations
    for view in views:
        assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert views[3]._base is x
    expected = torch.arange(12)
    assert_bit_exact(views[1].cpu(), expected.view(3, 4).t())
    assert_bit_exact(views[4].cpu(), expected.as_strided((2, 2), (1, 4), 1))
    views[0][1, 1].copy_(torch.tensor(-5))  # writes through the view
    assert x[5].item() == -5


def test_reshape_that_cannot_be_a_view_copies() -> None:
    x = torch.arange(12).to(EMBER).view(3, 4).t()
    flat = x.reshape(12)
    assert flat.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert_bit_exact(flat.cpu(), torch.arange(12).view(3, 4).t().reshape(12))
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        x.view(12)


# -- resize_ ---------------------------------------------------------------------------------


def test_resize_grows_and_keeps_data() -> None:
    x = torch.arange(6, dtype=torch.float64).to(EMBER)
    x.resize_(10)
    assert x.shape == (10,) and x.untyped_storage().nbytes() == 80
    assert_bit_exact(x[:6].cpu(), torch.arange(6, dtype=torch.float64))
    assert builder.live_device_allocations() == (1, 80)  # the old block was freed
    pointer = x.untyped_storage().data_ptr()
    x.resize_(2, 3)  # shrinking keeps the storage
    assert x.untyped_storage().data_ptr() == pointer and x.untyped_storage().nbytes() == 80
    assert_bit_exact(x.cpu(), torch.arange(6, dtype=torch.float64).view(2, 3))


def test_resize_grows_on_the_tensors_own_device() -> None:
    x = torch.arange(4).to(f"{EMBER}:1")
    x.resize_(100)
    assert x.device == torch.device(EMBER, 1)
    assert ember_driver.stats(1).bytes_in_use == 800
    assert ember_driver.stats(0).bytes_in_use == 0
    assert_bit_exact(x[:4].cpu(), torch.arange(4))


def test_resize_with_memory_format() -> None:
    x = torch.empty(0, device=EMBER).resize_(2, 3, 4, 5, memory_format=torch.channels_last)
    assert x.stride() == torch.empty(2, 3, 4, 5, memory_format=torch.channels_last).stride()


def test_resize_through_views_is_seen_by_the_base() -> None:
    x = torch.arange(4).to(EMBER)
    view = x.view(2, 2)
    view.resize_(3, 3)
    assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert_bit_exact(x.cpu(), torch.arange(4))


# -- set_ ------------------------------------------------------------------------------------


def test_set_source_tensor() -> None:
    x = torch.arange(12).to(EMBER).view(3, 4)[:, 1:]
    y = torch.empty(0, dtype=torch.int64, device=EMBER)
    y.set_(x)
    assert (y.shape, y.stride(), y.storage_offset()) == (x.shape, x.stride(), x.storage_offset())
    assert y.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert_bit_exact(y.cpu(), torch.arange(12).view(3, 4)[:, 1:])


def test_set_source_storage() -> None:
    x = torch.arange(6, dtype=torch.int32).to(EMBER)
    y = torch.empty(0, dtype=torch.int32, device=EMBER).set_(x.untyped_storage())
    assert y.shape == (6,)
    assert_bit_exact(y.cpu(), torch.arange(6, dtype=torch.int32))


def test_set_source_storage_offset_size_stride() -> None:
    x = torch.arange(12).to(EMBER)
    y = torch.empty(0, dtype=torch.int64, device=EMBER)
    y.set_(x.untyped_storage(), 1, (2, 3), (1, 4))
    assert_bit_exact(y.cpu(), torch.arange(12).as_strided((2, 3), (1, 4), 1))
    y.set_(x.untyped_storage(), 2, (4,))  # stride=[] means contiguous
    assert y.stride() == (1,)
    assert_bit_exact(y.cpu(), torch.arange(2, 6))


def test_set_past_the_end_grows_the_storage_like_cpu() -> None:
    x = torch.arange(6).to(EMBER)
    y = torch.empty(0, dtype=torch.int64, device=EMBER).set_(x.untyped_storage(), 0, (10,))
    assert x.untyped_storage().nbytes() == 80
    assert_bit_exact(y[:6].cpu(), torch.arange(6))


def test_set_empty_keeps_the_device() -> None:
    x = torch.arange(6).to(f"{EMBER}:1")
    x.set_()
    assert x.shape == (0,) and x.device == torch.device(EMBER, 1)


def test_set_to_a_storage_on_another_device_is_refused() -> None:
    y = torch.empty(0, dtype=torch.int64, device=EMBER)
    with pytest.raises(RuntimeError, match="Attempted to set the storage of a tensor on device"):
        y.set_(torch.arange(3).untyped_storage())


def test_deepcopy_uses_set() -> None:
    x = torch.arange(6).to(EMBER)
    y = copy.deepcopy(x)
    assert y.device == x.device and y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    assert_bit_exact(y.cpu(), torch.arange(6))


# -- _local_scalar_dense ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_item_matches_cpu(dtype: torch.dtype) -> None:
    src = sample(dtype, (3,), seed=4)
    on_device = src.to(EMBER)
    for index in range(3):
        expected, actual = src[index].item(), on_device[index].item()
        assert type(actual) is type(expected)
        assert actual == expected or (cmath.isnan(actual) and cmath.isnan(expected))


def test_python_scalars_and_printing() -> None:
    x = torch.tensor([3, 0, 7]).to(EMBER)
    assert int(x[0]) == 3 and not bool(x[1]) and float(x[2]) == 7.0
    assert str(x) == "tensor([3, 0, 7], device='privateuseone:0')"
    assert str(x.bool().to(f"{EMBER}:1")) == "tensor([ True, False,  True], device='privateuseone:1')"


def test_printing_floats_needs_compute_kernels() -> None:
    # Chapter 03's job: the formatter calls abs(), isfinite(), ... on the device.
    with pytest.raises(NotImplementedError, match="'aten::abs.out' with arguments from the 'PrivateUse1'"):
        str(torch.ones(2).to(EMBER))


def test_local_scalar_dense_needs_one_element() -> None:
    x = torch.arange(3).to(EMBER)
    with pytest.raises(RuntimeError, match="a Tensor with 3 elements cannot be converted to Scalar"):
        x.item()
    with pytest.raises(
        RuntimeError, match="ember: aten::_local_scalar_dense needs a tensor with exactly one"
    ):
        torch.ops.aten._local_scalar_dense(x)


# -- Two devices -----------------------------------------------------------------------------


def test_copy_between_ember_devices() -> None:
    src = sample(torch.float32, (4, 6), seed=5)
    on_0 = src.to(f"{EMBER}:0")
    allocations_before = ember_driver.stats(1).total_allocations
    on_1 = on_0.to(f"{EMBER}:1")
    assert on_1.device == torch.device(EMBER, 1)
    assert ember_driver.stats(1).total_allocations == allocations_before + 1
    assert_bit_exact(on_1.cpu(), src)
    assert_bit_exact(on_0.t()[1:].to(f"{EMBER}:1").cpu(), src.t()[1:])  # strided, staged
    back = torch.empty(4, 6, device=f"{EMBER}:0")
    back.copy_(on_1)
    assert_bit_exact(back.cpu(), src)


def test_factories_allocate_on_the_requested_device() -> None:
    x = torch.empty(5, device=f"{EMBER}:1")
    y = torch.empty_strided((2, 3), (1, 2), device=f"{EMBER}:1")
    assert x.device.index == y.device.index == 1
    assert ember_driver.stats(1).live_allocations == 2
    assert ember_driver.stats(0).live_allocations == 0
    assert torch.privateuseone.current_device() == 0  # the guard restored it


# -- The rest of the minimal set -------------------------------------------------------------


def test_copy_from_and_resize() -> None:
    dst = torch.empty(0, device=EMBER)
    torch.ops.aten._copy_from_and_resize(torch.arange(6.0).view(2, 3), dst)
    assert dst.shape == (2, 3)
    assert_bit_exact(dst.cpu(), torch.arange(6.0).view(2, 3))


def test_param_data_can_move_to_ember() -> None:
    param = torch.nn.Parameter(torch.ones(2))
    param.data = torch.arange(2.0).to(EMBER)
    assert isinstance(param, torch.nn.Parameter) and param.device.type == EMBER
    layer = torch.nn.Linear(2, 2)
    weight = layer.weight
    layer.to(EMBER)
    assert layer.weight is weight  # moved in place, as with CUDA
    assert layer.weight.device.type == EMBER


# -- Errors ----------------------------------------------------------------------------------


def test_pin_memory_is_refused() -> None:
    with pytest.raises(
        RuntimeError, match=r"ember: aten::empty.memory_format does not support pin_memory=True"
    ):
        torch.empty(3, device=EMBER, pin_memory=True)
    with pytest.raises(RuntimeError, match=r"ember: aten::empty_strided does not support pin_memory=True"):
        torch.empty_strided((3,), (1,), device=EMBER, pin_memory=True)


@pytest.mark.parametrize("layout", [torch.sparse_coo, torch.sparse_csr, torch.sparse_bsc, torch.jagged])
def test_non_strided_layouts_are_refused(layout: torch.layout) -> None:
    # Sparse layouts select SparsePrivateUse1 / SparseCsrPrivateUse1, torch.jagged selects
    # PrivateUse1: each key has a kernel that names the layout as Python spells it.
    with pytest.raises(
        RuntimeError,
        match=rf"^ember: aten::empty.memory_format does not support layout={layout}: "
        r"ember tensors are strided \(dense\) only",
    ):
        torch.empty(3, device=EMBER, layout=layout)


def test_negative_sizes_are_refused() -> None:
    with pytest.raises(
        RuntimeError, match=r"ember: aten::empty.memory_format got the negative size -1 in \[2, -1\]"
    ):
        torch.empty(2, -1, device=EMBER)
    with pytest.raises(RuntimeError, match=r"ember: aten::empty_strided got the negative size -2"):
        torch.empty_strided((-2,), (1,), device=EMBER)
    with pytest.raises(RuntimeError, match=r"ember: aten::resize_ got the negative size -1"):
        torch.arange(3).to(EMBER).resize_(-1)


def test_device_index_out_of_range() -> None:
    message = r"ember driver error: invalid device ordinal: device index 7 is out of range: there are 2 ember devices \(0..1\)"
    with pytest.raises(RuntimeError, match=message):
        torch.empty(3, device=f"{EMBER}:7")
    with pytest.raises(RuntimeError, match=message):
        torch.ones(3).to(f"{EMBER}:7")


# -- Memory ----------------------------------------------------------------------------------


def test_device_memory_returns_to_zero() -> None:
    frees = ember_driver.stats(0).total_frees
    tensors = [sample(dtype, (3, 4)).to(EMBER) for dtype in DTYPES]
    tensors += [t.view(-1) for t in tensors] + [t.t().contiguous() for t in tensors]
    grown = torch.arange(3).to(EMBER).resize_(50)
    assert builder.live_device_allocations()[0] == 2 * len(DTYPES) + 1
    del tensors, grown
    gc.collect()
    assert builder.live_device_allocations() == (0, 0)
    assert ember_driver.stats(0).total_frees == frees + 2 * len(DTYPES) + 2  # resize_ freed one more


# -- What the chapter reads off the wheel ----------------------------------------------------

DECLARATIONS = Path(torch.__file__).parent / "include" / "ATen" / "RegistrationDeclarations.h"


def declaration_flags() -> dict[str, dict[str, str]]:
    flags = {}
    for line in DECLARATIONS.read_text().splitlines():
        _, _, comment = line.partition("; // ")
        if comment.startswith("{"):
            entry = json.loads(comment)
            flags[entry["schema"].split("(")[0]] = entry
    return flags


def test_the_default_flag_says_whether_a_composite_kernel_exists() -> None:
    composites = (
        "CompositeImplicitAutograd",
        "CompositeExplicitAutograd",
        "CompositeExplicitAutogradNonFunctional",
    )
    known = set(torch._C._dispatch_get_all_op_names())
    flags = {op: entry for op, entry in declaration_flags().items() if op in known}
    assert len(flags) > 2000
    for op, entry in flags.items():
        has_composite = any(torch._C._dispatch_has_kernel_for_dispatch_key(op, k) for k in composites)
        assert (entry["default"] == "True") == has_composite, op
        if entry["dispatch"] == "False":
            assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd"), op


MINIMAL_OPS = [
    "aten::empty.memory_format",
    "aten::empty_strided",
    "aten::_copy_from",
    "aten::_copy_from_and_resize",
    "aten::_local_scalar_dense",
    "aten::as_strided",
    "aten::view",
    "aten::_reshape_alias",
    "aten::resize_",
    "aten::set_",
    "aten::set_.source_Storage",
    "aten::set_.source_Storage_storage_offset",
    "aten::set_.source_Tensor",
    "aten::_has_compatible_shallow_copy_type",
]


def test_only_one_minimal_operator_has_a_composite_kernel() -> None:
    flags = declaration_flags()
    composite = {op for op in MINIMAL_OPS if flags[op]["default"] == "True"}
    assert composite == {"aten::_has_compatible_shallow_copy_type"}
    assert {op for op in MINIMAL_OPS if flags[op]["dispatch"] == "False"} == composite
    for op in MINIMAL_OPS:  # each of them is ours at PrivateUse1 after the chapter
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"), op


def test_the_declaration_is_the_signature_ember_registers() -> None:
    line = next(
        text
        for text in DECLARATIONS.read_text().splitlines()
        if '"schema": "aten::empty.memory_format(' in text
    )
    assert line.startswith(
        "at::Tensor empty(c10::SymIntArrayRef size, ::std::optional<at::ScalarType> dtype, "
        "::std::optional<at::Layout> layout, ::std::optional<at::Device> device, "
        "::std::optional<bool> pin_memory, ::std::optional<at::MemoryFormat> memory_format);"
    )


def test_views_with_their_own_kernels_fail_on_ember() -> None:
    # Not composites: a CPU kernel of their own and nothing at PrivateUse1 (chapter 03's fallback
    # refuses unfold).
    for op in ("aten::unfold", "aten::view_as_real", "aten::view_as_complex"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(op, "CPU")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeExplicitAutograd")
        assert not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CompositeImplicitAutograd")
    x = torch.arange(6.0).to(EMBER)
    with pytest.raises(NotImplementedError, match="'aten::unfold' with arguments from the 'PrivateUse1'"):
        x.unfold(0, 2, 1)
    z = torch.zeros(2, dtype=torch.complex64).to(EMBER)
    with pytest.raises(
        NotImplementedError, match="'aten::view_as_real' with arguments from the 'PrivateUse1'"
    ):
        z.real  # noqa: B018 (the attribute access is the call)


def test_reshape_calls_view_or_reshape_alias() -> None:
    x = torch.arange(6).to(EMBER)

    def calls(fn: Callable[[], object]) -> list[str]:
        return [call.name for call in book.trace(fn).walk()]

    assert calls(lambda: x.reshape(3, 2)) == ["aten::reshape", "aten::view"]
    grid_t = x.view(2, 3).t()
    assert calls(lambda: grid_t.reshape(3, 2)) == ["aten::reshape", "aten::_reshape_alias"]
    assert "aten::as_strided" not in calls(lambda: x.detach())


# -- Rebuilding (last: these reload the backend) ---------------------------------------------


def test_a_wrong_kernel_signature_is_refused_and_the_backend_stays() -> None:
    """The chapter's exercise_wrong_dtype: `c10::ScalarType` for the schema's `ScalarType?`."""
    wrong = CHAPTER.exercises()["exercise_wrong_dtype"]
    with pytest.raises(CppBuildError) as refused:
        builder.build(parts=CHAPTER.parts_before() + [wrong], chapter=CHAPTER.slug)
    message = str(refused.value)
    assert "02_minimal_ops.ipynb[exercise_wrong_dtype]" in message
    assert "Argument 2 (dtype) must be `std::optional<c10::ScalarType>`, not `c10::ScalarType`" in message
    # The chapter's backend is still the loaded one, and works.
    assert builder.loaded() is not None and len(builder.loaded().parts) == len(CHAPTER.parts_through())
    assert_bit_exact(torch.arange(3.0).to(EMBER).cpu(), torch.arange(3.0))


@pytest.fixture
def with_fill_exercise() -> Iterator[None]:
    builder.build(
        parts=CHAPTER.parts_through() + [CHAPTER.exercises()["exercise_fill"]], chapter=CHAPTER.slug
    )
    yield
    gc.collect()
    builder.build(parts=CHAPTER.parts_through(), chapter=CHAPTER.slug)


@pytest.mark.usefixtures("with_fill_exercise")
def test_the_fill_exercise_fills_every_dtype_on_the_device() -> None:
    for dtype in DTYPES:
        assert_bit_exact(torch.ones(2, 3, dtype=dtype, device=EMBER).cpu(), torch.ones(2, 3, dtype=dtype))
        assert_bit_exact(torch.zeros(4, dtype=dtype, device=EMBER).cpu(), torch.zeros(4, dtype=dtype))
    grid = torch.zeros(3, 4, dtype=torch.int32, device=EMBER)
    grid[:, ::2].fill_(7)
    expected = torch.zeros(3, 4, dtype=torch.int32)
    expected[:, ::2] = 7
    assert_bit_exact(grid.cpu(), expected)
    assert_bit_exact(torch.full((2, 2), 2.5, device=EMBER).cpu(), torch.full((2, 2), 2.5))


def test_the_chapter_can_rebuild_in_one_process() -> None:
    """The notebook rebuilds after each step: each build retires the previous library and
    registers the same operators again, which the dispatcher must accept."""
    own = own_parts()
    for count in (1, 5, len(own)):  # empty; + copies, scalars, views; everything
        builder.build(parts=CHAPTER.parts_before() + own[:count], chapter=CHAPTER.slug)
        x = torch.empty(2, 3, device=EMBER)
        assert x.device.type == EMBER
        del x
    assert_bit_exact(torch.arange(3.0).to(EMBER).view(3, 1).cpu(), torch.arange(3.0).view(3, 1))
