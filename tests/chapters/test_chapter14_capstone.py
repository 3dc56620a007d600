"""Chapter 14's claims, checked on the backend the chapter ends with.

The chapter's own cells (its helpers, its model and data, its training loop) run in one child process that loads
chapter 14's build, as its kernel does; the facts come back as JSON. The child is needed because chapter 13's name
("ember") and the autograd engine's device queues are once-per-process state (see tests/conftest.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from book.display.widgets import by_chapter
from book.paths import REPO
from book.run.chapter import Chapter, chapters

# The cells of the chapter whose definitions the claims use, by id.
CELLS = ("c12imports", "c12data", "c12train")

CHILD = textwrap.dedent(
    """
    import json
    import sys

    import book  # before torch: it turns PyTorch's backend autoload off
    import torch
    from book.run.chapter import Chapter

    chapter = Chapter.of("capstone")
    chapter.build({})
    cells = {cell["id"]: "".join(cell["source"]) for cell in chapter._notebook["cells"]}
    namespace = {"__name__": "chapter12"}
    for cell in json.loads(sys.argv[1]):
        exec(compile(cells[cell], f"14_capstone.ipynb[{cell}]", "exec"), namespace)
    exec(compile(CLAIMS, "claims", "exec"), namespace)
    """
)

CLAIMS = textwrap.dedent(
    """
    facts = {}
    tolerance = 0.002  # the chapter's TOLERANCE

    # The training step's calls that reach the CPU fallback, float32 and float16, on chapter 14's build.
    for amp in (False, True):
        model, optimizer, scaler = start(E)
        with FallbackCalls() as seen:
            train_step(model, optimizer, scaler, *batch(0, E), amp=amp)
        facts[f"fallback_calls_amp_{amp}"] = dict(seen.calls)
        del model, optimizer, scaler

    # The loss curves: CPU and ember (resumed on ember:1 from a checkpoint), float16 autocast, shared masks.
    cpu, ember = train("cpu", "cpu"), train(f"{E}:0", f"{E}:1")
    facts["max_gap"] = float((cpu - ember).abs().max())
    facts["learned"] = float(cpu[-5:].mean()) < 0.75 * float(cpu[:5].mean())
    facts["finite"] = bool(torch.isfinite(ember).all())
    facts["tolerance"] = tolerance

    # The tolerance can fail: a relu whose negative side leaks 1 % (a small kernel error), on the CPU.
    correct_model = make_model

    def leaky_model(dropout=None):
        model = correct_model(dropout)
        model[2], model[6] = torch.nn.LeakyReLU(0.01), torch.nn.LeakyReLU(0.01)
        return model

    globals()["make_model"] = leaky_model
    facts["leaky_gap"] = float((train("cpu", "cpu") - cpu).abs().max())
    globals()["make_model"] = correct_model

    # torch.compile(backend="aot_eager") of the step, on a shorter run (same checkpoint and device move).
    globals()["STEPS"], globals()["RESUME_AT"] = 4, 2
    eager = train(f"{E}:0", f"{E}:1")
    torch._dynamo.reset()
    compiled = train(f"{E}:0", f"{E}:1", step=torch.compile(train_step, backend="aot_eager"))
    facts["compiled_equal"] = bool(torch.equal(compiled, eager))
    facts["graphs"] = int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    # The by-chapter table, read from the live dispatcher.
    from book.display.widgets import by_chapter, by_chapter_view

    ops = ["aten::empty.memory_format", "aten::native_batch_norm", "aten::add.out", "aten::_foobar", "aten::mm",
           "aten::allclose", "ember::custom_abs", "aten::convolution", "aten::max_pool2d_with_indices",
           "aten::convolution_overrideable"]
    data = by_chapter.read(ops)
    facts["groups"] = {stem: sorted({f.op for f in g.kernels}) for stem, g in data.groups.items()}
    facts["filled"] = {
        f"{f.op} {f.key}": [f.chapter, f.part, f.revised_in, f.entry.location]
        for g in data.groups.values()
        for f in g.kernels
    }
    facts["revised"] = {stem: g.revised for stem, g in data.groups.items()}
    everything = by_chapter.read()
    facts["all_groups"] = {stem: len(g.kernels) for stem, g in everything.groups.items()}
    facts["all_revised"] = {stem: g.revised for stem, g in everything.groups.items()}
    facts["shared"] = {stem: [[s.key, s.part, s.entry.kind] for s in g.shared] for stem, g in data.groups.items()}
    facts["unattributed"] = len(data.unattributed)
    facts["chapter_of"] = {
        op: data.chapter_of(op, key)
        for op, key in [
            ("aten::empty.memory_format", "PrivateUse1"),
            ("aten::native_batch_norm", "PrivateUse1"),
            ("aten::add.out", "PrivateUse1"),
            ("aten::_foobar", "PrivateUse1"),
            ("aten::mm", "AutocastPrivateUse1"),
        ]
    }
    raw = torch._C._dispatch_dump("aten::empty.memory_format")
    facts["raw_empty"] = [line for line in raw.splitlines() if line.startswith("PrivateUse1:")]
    view = by_chapter_view.DispatchTableByChapter(ops)
    bundle = view._repr_mimebundle_()
    facts["html"] = bundle["text/html"]
    facts["text"] = bundle["text/plain"]
    facts["html_again"] = by_chapter_view.DispatchTableByChapter(ops)._repr_mimebundle_()["text/html"]
    print("FACTS" + json.dumps(facts))
    """
)


@pytest.fixture(scope="module")
def facts() -> dict[str, Any]:
    environment = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0", EMBER_BOOK_BATCH="1")
    child = subprocess.run(
        [sys.executable, "-c", f"CLAIMS = {CLAIMS!r}\n" + CHILD, json.dumps(CELLS)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=environment,
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    line = next(line for line in child.stdout.splitlines() if line.startswith("FACTS"))
    return json.loads(line.removeprefix("FACTS"))


def test_the_chapter_cells_the_claims_use_exist() -> None:
    cells = {cell["id"] for cell in Chapter.of("capstone")._notebook["cells"]}
    assert set(CELLS) <= cells
    assert {"c12run", "c12plot", "c12compile", "c12table"} <= cells


def test_no_call_of_a_training_step_reaches_the_cpu_fallback(facts: dict[str, Any]) -> None:
    assert facts["fallback_calls_amp_False"] == {}
    assert facts["fallback_calls_amp_True"] == {}


def test_ember_loss_curve_equals_the_cpus_within_the_stated_tolerance(facts: dict[str, Any]) -> None:
    assert facts["finite"]
    assert facts["learned"]  # a curve that stays flat would agree trivially
    assert facts["max_gap"] <= facts["tolerance"]
    assert facts["leaky_gap"] > facts["tolerance"]  # the bound catches a 1 % error in one kernel


def test_compiled_training_step_gives_the_eager_losses(facts: dict[str, Any]) -> None:
    assert facts["compiled_equal"]
    assert facts["graphs"] >= 1


def test_dispatch_table_groups_entries_by_the_chapter_that_registered_them(facts: dict[str, Any]) -> None:
    groups, chapter_of = facts["groups"], facts["chapter_of"]
    assert "aten::empty.memory_format" in groups["minimal_ops"]
    assert chapter_of["aten::empty.memory_format"] == "minimal_ops"
    # The dispatcher's own record says so: the location names chapter 02's notebook and part.
    (line,) = facts["raw_empty"]
    assert "02_minimal_ops.ipynb[" in line
    # Chapter 14's kernels: batch norm is no longer served by chapter 03's fallback.
    assert chapter_of["aten::native_batch_norm"] == "capstone"
    assert facts["filled"]["aten::native_batch_norm PrivateUse1"][2] is None  # not revised
    # An operator with no kernel of its own is served by chapter 03's fallback.
    assert ["PrivateUse1", "cpu_fallback", "fallback"] in facts["shared"]["fallback"]
    assert ["AutocastPrivateUse1", "autocast_fallthrough", "fallthrough"] in facts["shared"]["autocast"]
    assert chapter_of["aten::mm"] == "autocast"
    assert facts["unattributed"] == 0
    # Every group is a chapter of the book, in book order.
    order = [chapter.slug for chapter in chapters()]
    assert set(groups) <= set(order)
    assert list(groups) == sorted(groups, key=order.index)


def test_a_revised_kernel_stays_with_the_chapter_that_introduced_it(facts: dict[str, Any]) -> None:
    # Chapter 14 revised chapter 04's binary kernels: the dispatcher's location names chapter 14's
    # version, the row stays with chapter 04, marked as revised in 14.
    chapter, part, revised_in, location = facts["filled"]["aten::add.out PrivateUse1"]
    assert (chapter, part, revised_in) == ("stub_kernels", "binary_ops", "capstone")
    assert location.startswith("14_capstone.ipynb[binary_ops]")
    assert facts["chapter_of"]["aten::add.out"] == "stub_kernels"
    # The convolution: introduced by a chapter before 14 (the one whose version first registers it).
    chapter, part, revised_in, _ = facts["filled"]["aten::convolution_overrideable PrivateUse1"]
    assert Chapter.of(chapter).index < Chapter.of("capstone").index and revised_in == "capstone"
    assert "revised in 14" in facts["html"]


def test_every_chapter_that_registered_kernels_keeps_its_rows(facts: dict[str, Any]) -> None:
    # Chapter 04's rows no longer move to chapter 14, which revised its kernel parts: they are marked.
    groups, revised = facts["all_groups"], facts["all_revised"]
    stub = "stub_kernels"
    assert groups[stub] >= 20 and revised[stub].get("capstone", 0) >= 20
    # The chapters split out of chapter 04 (matrix products, convolution) keep theirs too.
    for slug in ("matrix_products", "convolution"):
        assert groups.get(slug, 0) > 0, slug
    # Chapter 14's own rows are the kernels it introduced, none of them revised.
    assert groups["capstone"] > 0 and revised["capstone"] == {}


def test_by_chapter_widget_renders_static_deterministic_html(facts: dict[str, Any]) -> None:
    html, text = facts["html"], facts["text"]
    assert html == facts["html_again"]
    assert html.startswith('<div class="ember-by-chapter" style="')
    assert "<script" not in html
    assert html.count("<details") == len(facts["groups"])
    assert "/work/" not in html + text and "site-packages" not in html + text
    assert len(text.splitlines()) < 60


def test_origin_reads_only_chapter_build_locations() -> None:
    assert by_chapter.origin("09_autocast.ipynb[autocast_fallthrough]:4") == (
        "autocast",
        "autocast_fallthrough",
    )
    assert by_chapter.origin("aten/src/ATen/core/PythonFallbackKernel.cpp:192") is None
    assert by_chapter.origin("extension/csrc/aten/EmberNorm.cpp:10") is None
    assert by_chapter.origin(None) is None
