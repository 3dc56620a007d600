"""The widgets read the live dispatcher and the driver: check them against known registrations and paths."""

from __future__ import annotations

import gc
import re
from collections.abc import Iterator

import pytest
import torch

import book
from book.builds import builder
from book.display.widgets import dispatch_trace as tr
from book.display.widgets import table as t
from book.display.widgets import trace_view
from book.display.widgets.html import inline
from book.display.widgets.table_view import DispatchTable
from book.run.chapter import Chapter

EMBER = "privateuseone"

TABLE_OPS = ["aten::empty.memory_format", "aten::add.out", "aten::add.Tensor"]
TABLE_KEYS = ["PrivateUse1", "AutogradPrivateUse1", "CPU"]


# Function-scoped on purpose: each test gets the backend it names. Switching is cheap,
# since a build that was loaded before comes back from the build cache.
@pytest.fixture
def before_ember() -> t.Snapshot:
    """Chapter 01's backend (allocator and guard, no operator kernels) and a snapshot of it."""
    gc.collect()
    Chapter.of("allocator").build()
    return book.snapshot(TABLE_OPS)


@pytest.fixture
def chapter02() -> Iterator[builder.Build]:
    """The backend as chapter 02 leaves it: the minimal operators."""
    gc.collect()
    yield Chapter.of("minimal_ops").build()
    gc.collect()


@pytest.fixture
def ember() -> Iterator[builder.Build]:
    """The backend as chapter 03 leaves it: minimal operators and the CPU fallback."""
    gc.collect()
    yield Chapter.of("fallback").build()
    gc.collect()


# ---- the table, on plain torch ----------------------------------------------------------


def test_table_entries_on_plain_torch() -> None:
    add = t.entry("aten::add.Tensor", "CPU")
    assert add.kind == t.KERNEL
    assert add.location is not None and re.fullmatch(
        r"build/aten/src/ATen/RegisterCPU_\d+\.cpp:\d+", add.location
    )
    linear = t.entry("aten::linear", "CPU")
    assert (linear.kind, linear.alias) == (t.ALIAS, t.CIA)
    assert t.entry("aten::add.Tensor", "AutogradCPU").alias == "Autograd"
    assert t.entry("aten::add.Tensor", "PrivateUse1").alias == t.CEA_NF
    assert t.entry("aten::empty_like", "CPU").alias == t.CEA
    assert t.entry("aten::add.Tensor", "ADInplaceOrView").kind == t.FALLTHROUGH
    # Nothing at ember's autocast key, unless an earlier test in this process loaded a build of chapter
    # 09 or later, whose autocast fallthrough then serves every operator there (xdist decides the order).
    autocast_fallthrough = torch._C._dispatch_has_backend_fallback(torch._C.DispatchKey.AutocastPrivateUse1)
    expected = t.FALLTHROUGH if autocast_fallthrough else t.NOTHING
    assert t.entry("aten::add.Tensor", "AutocastPrivateUse1").kind == expected
    # A kernel registered from Python, with a machine-independent location.
    assert t.entry("aten::add.Tensor", "Meta").location == "torch/_meta_registrations.py:54"


def test_empty_has_nothing_for_privateuse1_before_an_ember_kernel(before_ember: t.Snapshot) -> None:
    assert t.entry("aten::empty.memory_format", "PrivateUse1") == t.NONE_ENTRY
    assert before_ember.entry("aten::empty.memory_format", "PrivateUse1").kind == t.NOTHING


def test_globs_expand_sorted_and_unknown_names_fail() -> None:
    ops = t.expand(["aten::empty*", "aten::add.Tensor"])
    empties = [op for op in ops if op != "aten::add.Tensor"]
    assert "aten::empty.memory_format" in empties and empties == sorted(empties)
    assert ops[-1] == "aten::add.Tensor"
    with pytest.raises(ValueError, match="not an operator"):
        t.expand(["aten::no_such_op"])
    with pytest.raises(ValueError, match="alias key"):
        t.check_keys(["CompositeImplicitAutograd"])


def test_locations_are_normalized() -> None:
    assert t.normalize_location("registered at /__w/pytorch/pytorch/aten/src/X.cpp:3") == "aten/src/X.cpp:3"
    assert (
        t.normalize_location("registered at /opt/py/lib/python3.11/site-packages/torch/a.py:5")
        == "torch/a.py:5"
    )
    assert (
        t.normalize_location("registered at 02_minimal_ops.ipynb[empty]:12")
        == "02_minimal_ops.ipynb[empty]:12"
    )
    assert (
        t.normalize_location("registered at /x/y/extension/csrc/aten/F.cpp:9")
        == "extension/csrc/aten/F.cpp:9"
    )


# ---- the table, after an ember build ----------------------------------------------------


def test_after_chapter_02_empty_has_our_kernel_and_add_out_nothing(chapter02: builder.Build) -> None:
    empty = t.entry("aten::empty.memory_format", "PrivateUse1")
    assert empty.kind == t.KERNEL and empty.ours
    assert re.fullmatch(r"02_minimal_ops\.ipynb\[empty_memory_format\]:\d+", empty.location or "")
    assert t.entry("aten::add.out", "PrivateUse1") == t.NONE_ENTRY
    # Never empty on 2.13: add.Tensor's structured default kernel (it calls add.out).
    add = t.entry("aten::add.Tensor", "PrivateUse1")
    assert (add.alias, add.ours) == (t.CEA_NF, False)


def test_after_chapter_03_add_out_has_the_fallback(ember: builder.Build) -> None:
    fallback = t.entry("aten::add.out", "PrivateUse1")
    assert fallback.kind == t.FALLBACK and fallback.ours
    assert re.fullmatch(r"03_fallback\.ipynb\[cpu_fallback\]:\d+", fallback.location or "")
    # A kernel, even a composite one, still wins over the backend fallback.
    assert t.entry("aten::empty.memory_format", "PrivateUse1").kind == t.KERNEL
    assert t.entry("aten::add.Tensor", "PrivateUse1").alias == t.CEA_NF


def test_since_shows_exactly_the_changed_cells(before_ember: t.Snapshot, ember: builder.Build) -> None:
    data = t.table_data(TABLE_OPS, TABLE_KEYS, since=before_ember)
    changed = {(c.op, c.key): c.change for c in data.changed()}
    assert changed == {
        ("aten::empty.memory_format", "PrivateUse1"): t.ADDED,
        ("aten::add.out", "PrivateUse1"): t.ADDED,
    }
    text = DispatchTable(TABLE_OPS, TABLE_KEYS, since=before_ember).text()
    assert "+kernel ★" in text and "+fallback ★" in text
    assert re.search(
        r"aten::empty\.memory_format @ PrivateUse1\s+kernel\s+02_minimal_ops\.ipynb\[empty_memory_format\]:\d+",
        text,
    )


def test_table_renders_deterministic_html_and_text(ember: builder.Build) -> None:
    first, second = DispatchTable(TABLE_OPS, TABLE_KEYS), DispatchTable(TABLE_OPS, TABLE_KEYS)
    bundle = first._repr_mimebundle_()
    assert bundle == second._repr_mimebundle_()  # outside a live kernel: no widget view
    assert set(bundle) == {"text/plain", "text/html"}
    html = bundle["text/html"]
    # Styles live in style attributes (JupyterLab's sanitizer drops <style> from untrusted notebooks).
    assert html.startswith('<div class="ember-dispatch-table" style="font-family:')
    assert "<script" not in html and "<style" not in html
    assert html.count('<td class="ember-cell') == len(TABLE_OPS) * len(TABLE_KEYS)
    assert re.search(r'<td class="ember-cell ember-kernel"[^>]* style="[^"]*background: #dbeafe', html)
    # Long key names wrap in the header: the functionality above the backend.
    assert '<th class="ember-key" title="AutogradPrivateUse1"' in html and "Autograd<br>PrivateUse1" in html
    assert "ember-kernel ember-ours" in html and "ember-fallback ember-ours" in html
    assert 'title="kernel registered at build/aten/src/ATen/RegisterCPU_' in html
    lines = bundle["text/plain"].splitlines()
    assert [cell.strip() for cell in lines[1].split("│")] == ["", "", "Autograd", ""]
    assert lines[2].split(" │ ") == [
        "operator".ljust(len("aten::empty.memory_format")),
        "PrivateUse1",
        "PrivateUse1",
        "CPU",
    ]
    assert not re.search(r"0x[0-9a-f]{6,}|/__w/|site-packages", bundle["text/plain"] + html)


# ---- the trace ----------------------------------------------------------------------------


def test_trace_of_add_on_cpu_goes_through_autograd_to_the_cpu_kernel() -> None:
    a, b = torch.ones(3), torch.ones(3)
    trace = book.trace(lambda: torch.add(a, b))
    (call,) = trace.calls
    assert call.name == "aten::add.Tensor"
    assert call.keys == ["AutogradCPU", "CPU"]  # ADInplaceOrView and BackendSelect: fallthroughs, masked out
    assert call.masked == ["ADInplaceOrView", "BackendSelect"]
    assert call.passed == ["AutogradCPU"]
    assert call.skipped == ["ADInplaceOrView", "BackendSelect"]
    assert call.final is not None and call.final.key == "CPU"
    assert call.kernel == tr.CPU_KERNEL
    assert call.children == []
    # Where the call entered is computed when it starts; the hop below autograd is reconstructed.
    assert [(s.key, s.inferred, s.via) for s in call.path if s.action != tr.SKIPPED] == [
        ("AutogradCPU", False, tr.ENTRY),
        ("CPU", True, tr.AFTER_AUTOGRAD),
    ]


def test_trace_nests_a_composite_decomposition() -> None:
    x, w = torch.ones(2, 3), torch.ones(4, 3)
    trace = book.trace(lambda: torch.nn.functional.linear(x, w))
    (linear,) = trace.calls
    assert linear.name == "aten::linear"
    assert linear.kernel == tr.COMPOSITE_IMPLICIT and linear.final is not None
    assert linear.final.key == "AutogradCPU"  # CompositeImplicitAutograd runs above autograd
    assert [c.name for c in linear.calls] == ["aten::t", "aten::matmul"]
    (mm,) = trace.find("aten::mm")
    assert mm.kernel == tr.CPU_KERNEL
    # Inside the autograd kernel of mm, autograd is excluded: the nested calls have no autograd key.
    assert all(not k.startswith("Autograd") for c in mm.calls for k in c.keys)


def test_trace_in_inference_mode_has_no_autograd_keys() -> None:
    a = torch.ones(2)
    with torch.inference_mode():
        trace = book.trace(lambda: torch.mul(a, a))
    (call,) = trace.calls
    assert not any(k.startswith("Autograd") for k in call.keys)
    assert call.kernel == tr.CPU_KERNEL and call.passed == []
    # The call entered at its backend: nothing was reconstructed, and neither view claims otherwise.
    assert call.path[-1].inferred is False and not trace.inferred
    assert trace.text().splitlines()[-1] == trace_view.LEGEND_SKIPPED
    body = trace.html().split("</style>", 1)[1]  # after the few rules that cannot be inlined
    assert "ember-inferred" not in body and "inferred from" not in body


def test_trace_of_an_ember_tensor_shows_malloc_and_free(ember: builder.Build) -> None:
    def make_and_drop() -> None:
        x = torch.empty(4, device=EMBER)
        del x

    trace = book.trace(make_and_drop)
    (empty,) = trace.calls
    assert empty.name == "aten::empty.memory_format"
    assert [s.key for s in empty.path] == ["BackendSelect", "PrivateUse1"]
    assert [s.via for s in empty.path] == [tr.ENTRY, tr.BACKEND_SELECT]
    assert empty.kernel == tr.EMBER_KERNEL
    assert [(e.kind, e.bytes, e.device) for e in empty.events] == [("malloc", 16, 0)]
    top_events = [i for i in trace.items if isinstance(i, tr.DeviceEvent)]
    assert [(e.kind, e.bytes) for e in top_events] == [("free", 16)]
    assert [e.kind for e in trace.all_events()] == ["malloc", "free"]


def test_trace_shows_the_backend_fallback(ember: builder.Build) -> None:
    held = [torch.empty(2, device=EMBER)]
    trace = book.trace(lambda: held[0].fill_(1.0))
    held.clear()  # free the device memory before the next build
    (fill,) = trace.calls
    assert fill.name == "aten::fill_.Scalar"
    assert fill.passed == ["AutogradPrivateUse1", "ADInplaceOrView"]
    assert fill.kernel == tr.BACKEND_FALLBACK
    assert fill.final is not None and fill.final.key == "PrivateUse1"
    assert (fill.final.entry.location or "").startswith("03_fallback.ipynb[cpu_fallback]:")


def test_trace_of_copies_shows_h2d_and_d2h(ember: builder.Build) -> None:
    host = torch.arange(6, dtype=torch.float32)

    def round_trip() -> None:
        on_device = host.to(EMBER)
        on_device.cpu()

    trace = book.trace(round_trip)
    (copy_from_h,) = [c for c in trace.find("aten::_copy_from") if c.events[0].direction == "H2D"]
    assert copy_from_h.kernel == tr.EMBER_KERNEL
    assert [(e.kind, e.direction, e.bytes, e.device) for e in copy_from_h.events] == [
        ("memcpy", "H2D", 24, 0)
    ]
    assert [(e.kind, e.direction, e.bytes) for e in trace.all_events()] == [
        ("malloc", None, 24),
        ("memcpy", "H2D", 24),
        ("memcpy", "D2H", 24),
        ("free", None, 24),
    ]
    # _to_copy's BackendSelect kernel redispatches with the target device's key and the tensor's keys:
    # both copies run at PrivateUse1, the higher of PrivateUse1 and CPU.
    to_device, to_host = trace.find("aten::_to_copy")
    for to_copy in (to_device, to_host):
        assert to_copy.kernel == tr.COMPOSITE_EXPLICIT  # _to_copy is registered at CompositeExplicitAutograd
        assert [s.key for s in to_copy.path if s.action != tr.SKIPPED][-2:] == [
            "BackendSelect",
            "PrivateUse1",
        ]
    assert [(c.name, c.final.key if c.final else None) for c in to_host.calls] == [
        ("aten::empty_strided", "CPU"),
        ("aten::copy_", "PrivateUse1"),
    ]


def test_a_failing_function_raises_and_frees_the_probe(ember: builder.Build) -> None:
    # Chapter 03's fallback refuses random numbers (they would come from the CPU's generator).
    with pytest.raises(RuntimeError, match="cannot fall back to the CPU"):
        book.trace(lambda: torch.randn(2, device=EMBER))
    assert book.trace(lambda: None).items == []


def test_trace_renders_deterministic_html_and_text(ember: builder.Build) -> None:
    def work() -> None:
        torch.nn.functional.linear(torch.ones(2, 3), torch.ones(4, 3))
        x = torch.empty(4, device=EMBER)
        del x

    first, second = book.trace(work), book.trace(work)
    assert first.text() == second.text()
    assert first.html() == second.html()
    html = first.html()
    assert html.startswith('<div class="ember-trace" style="') and "<script" not in html
    # Only pseudo-element and pseudo-class rules stay in a <style> block: the rest is inlined.
    (block,) = re.findall(r"<style>(.*?)</style>", html)
    assert all(":" in selector for selector in re.findall(r"([^{}]+)\{", block))
    rows = len(list(first.walk())) + len(first.all_events())
    assert html.count('class="ember-trace-row') == rows
    assert "ember-badge ember-k-ember" in html and "ember-event" in html
    # Inferred steps are marked, and both views explain the mark.
    assert (
        html.count("ember-chip ember-passed ember-inferred")
        + html.count("ember-chip ember-ran ember-inferred")
        == sum(1 for c in first.walk() for s in c.path if s.inferred and s.action != tr.SKIPPED) + 1
    )  # + the legend's sample chip
    assert "inferred from the dispatch table" in html
    text = first.text()
    assert "aten::linear  AutogradCPU  ⇒ CompositeImplicitAutograd" in text
    assert re.search(
        r"aten::empty\.memory_format  BackendSelect → PrivateUse1\*  ⇒ ember kernel  02_minimal_ops", text
    )
    assert text.splitlines()[-1] == f"{trace_view.LEGEND_SKIPPED} · {trace_view.LEGEND_INFERRED}"
    assert "▪ malloc 16 B on privateuseone:0" in text and "▪ free 16 B on privateuseone:0" in text
    assert not re.search(r"0x[0-9a-f]{6,}|\d+\.\d+ ?(s|ms|us)\b|thread", text + html)


def test_inline_copies_rules_into_style_attributes() -> None:
    css = """
    .w { color: red; margin: 0; }
    .w td { padding: 1px; }
    .w td.k { color: blue; }
    .w tr > td { border: 1px solid; }
    .w td::before { content: "x"; }
    """
    markup = (
        '<div class="w"><table><tr><td class="k" title="a &amp; b">x</td><td style="color: green">y</td></tr>'
    )
    markup += "</table><details open><summary>s</summary></details></div>"
    assert inline(markup, css) == (
        '<div class="w" style="color: red; margin: 0"><style>.w td::before { content: "x"; }</style>'
        '<table><tr><td class="k" title="a &amp; b" style="padding: 1px; border: 1px solid; color: blue">x</td>'
        '<td style="padding: 1px; border: 1px solid; color: green">y</td></tr></table>'
        "<details open><summary>s</summary></details></div>"
    )


def test_live_controls_rerender_from_the_dispatcher(ember: builder.Build) -> None:
    from book.display.widgets import interactive

    table = DispatchTable(["aten::add.Tensor"], ["CPU"])
    box = interactive.controls(table)
    parts = box.ember_controls
    assert parts["output"].value == table.html()
    parts["ops"].value = "aten::empty.memory_format, aten::add.out"
    parts["keys"].value = ["PrivateUse1"]
    assert parts["output"].value == DispatchTable(TABLE_OPS[:2], ["PrivateUse1"]).html()
    parts["ops"].value = "aten::no_such_op"
    assert "ember-error" in parts["output"].value and "not an operator" in parts["output"].value


@pytest.mark.parametrize(
    ("key", "location", "kind"),
    [
        ("PrivateUse1", "<notebook cell>:12", tr.EMBER_KERNEL),  # the reader's Python kernel for ember
        ("SparseCPU", "<notebook cell>:12", tr.OTHER_KERNEL),  # the reader's, but not ember's (chapter 00)
        ("CPU", "07_custom_ops.ipynb[custom_abs]:40", tr.EMBER_KERNEL),  # the book's C++, any key
        ("CPU", "build/aten/src/ATen/RegisterCPU_3.cpp:4482", tr.CPU_KERNEL),
    ],
)
def test_only_the_books_cpp_and_kernels_at_embers_keys_are_ember_kernels(key, location, kind):
    step = tr.Step(key, t.Entry(t.KERNEL, location=location), tr.RAN, inferred=False)
    assert tr.kernel_kind(step) == kind


# -- the by-chapter table (book.show_by_chapter): rows stay with the chapter that introduced them --------


def test_a_revised_registration_stays_with_the_chapter_that_introduced_it() -> None:
    from book.display.widgets import by_chapter

    # Chapter 14 revises chapter 04's binary kernels: add.out was registered by chapter 04's first version.
    assert by_chapter.introduced_by("capstone", "binary_ops", "aten::add.out") == "stub_kernels"
    assert by_chapter.introduced_by("capstone", "binary_ops") == "stub_kernels"
    # A part chapter 14 introduced, and a part no notebook shows (a reader's new cell).
    assert by_chapter.introduced_by("capstone", "batch_norm", "aten::native_batch_norm") == "capstone"
    assert by_chapter.introduced_by("capstone", "no_such_part", "aten::add.out") == "capstone"
    # An operator a revision registers and no earlier version names belongs to the reviser.
    versions = by_chapter._versions("capstone", "blas_ops")
    assert len(versions) >= 2 and versions[-1][0] == "capstone"
    if '"addr"' in versions[-1][1] and not any('"addr"' in source for _, source in versions[:-1]):
        assert by_chapter.introduced_by("capstone", "blas_ops", "aten::addr") == "capstone"
    assert by_chapter.introduced_by("capstone", "blas_ops", "aten::mm.out") == versions[0][0]


def test_the_by_chapter_view_marks_revised_entries() -> None:
    from book.display.widgets import by_chapter as b
    from book.display.widgets import by_chapter_view as v

    location = "14_capstone.ipynb[binary_ops]:12"
    kernel = t.Entry(t.KERNEL, location=location, provenance="kernel")
    fallback = t.Entry(t.FALLBACK, location="03_fallback.ipynb[cpu_fallback]:39", provenance="fallback")
    stub = b.ChapterGroup(
        "stub_kernels",
        kernels=[
            b.Filled("aten::add.out", "PrivateUse1", kernel, "stub_kernels", "binary_ops", "capstone"),
            b.Filled("aten::mul.out", "PrivateUse1", kernel, "stub_kernels", "binary_ops", "capstone"),
        ],
    )
    fallback_group = b.ChapterGroup(
        "fallback", shared=[b.Shared("PrivateUse1", fallback, "fallback", "cpu_fallback", 500)]
    )
    data = b.ByChapter(2, ("PrivateUse1",), {"fallback": fallback_group, "stub_kernels": stub}, {}, [])
    assert stub.revised == {"capstone": 2} and fallback_group.revised == {}
    text = v.render_text(data)
    row = next(line for line in text.splitlines() if line.startswith("04_stub_kernels"))  # its notebook
    assert row.split()[1:5] == ["2", "2", "2", "in"] and "14" in row
    html = v.render_html(data)
    assert html.count("revised in 14") == 2  # each of chapter 04's rows, in its details
    assert "revised later</th>" in html and "2 in 14" in html
