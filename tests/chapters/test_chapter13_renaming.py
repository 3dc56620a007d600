"""Chapter 13: the backend's name, from C++ (chapter 13's `backend_name` part) and from Python (its
carry-forward cell, which supersedes chapter 08's rename).

A process can name PrivateUse1 only once, and this test process holds the earlier chapters' name, so
everything that registers a name runs in a child process.
"""

from __future__ import annotations

import pytest
from book_child import child_facts

from book.run.chapter import Chapter, chapters

CHILD_TIMEOUT_SECONDS = 600


def child(code: str) -> dict:
    """Run `code` in a fresh interpreter (autoload off, as in the book); it prints one JSON object last."""
    facts, stderr = child_facts(code, CHILD_TIMEOUT_SECONDS)
    facts["stderr"] = stderr
    return facts


# --- the chapter's cells ---------------------------------------------------------------------------


def test_chapter_13_starts_without_chapter_08s_name_and_carries_ember_forward() -> None:
    earlier = [
        source
        for chapter in chapters()[: Chapter.of("renaming").index]
        for source in chapter.carried_cells(for_chapter="renaming")
    ]
    assert not any("rename_privateuse1_backend" in source for source in earlier)
    (own,) = [
        source
        for _, source in Chapter.of("renaming").carried_cells()
        if "rename_privateuse1_backend" in source
    ]
    assert 'rename_privateuse1_backend("ember")' in own
    assert 'torch._register_device_module("ember", book.device_module())' in own
    assert "generate_methods_for_privateuse1_backend(for_storage=True)" in own


def test_the_name_part_is_in_chapter_13s_build_and_checks_before_registering() -> None:
    parts = {part.name: part for part in Chapter.of("renaming").parts_through()}
    part = parts["backend_name"]
    assert part.chapter == "renaming"
    assert "c10::is_privateuse1_backend_registered()" in part.source
    assert 'c10::register_privateuse1_backend("ember")' in part.source
    assert "backend_name" not in {p.name for p in Chapter.of("autograd").parts_through()}


# --- the backend as chapter 13 leaves it (in a child) ------------------------------------------------


@pytest.fixture(scope="module")
def chapter_13() -> dict:
    return child(
        """
        import io, json, warnings
        import book, torch
        from book.run.chapter import Chapter, chapters

        Chapter.of("renaming").build()
        facts = {"name": torch._C._get_privateuse1_backend_name()}
        facts["type"] = torch.ones(2, device="ember").type()  # the first type string of the process
        facts["accelerator"] = str(torch.accelerator.current_accelerator())
        facts["module"] = torch.ember is book.device_module() and torch.privateuseone is torch.ember
        facts["utils_name"] = torch.utils.backend_registration._privateuse1_backend_name
        facts["profiler"] = str(torch.profiler.ProfilerActivity.PrivateUse1)
        t = torch.arange(4.0)
        facts["tensor"] = [str(t.ember(1).device), t.ember().is_ember, t.is_ember]
        facts["module_method"] = str(torch.nn.Linear(2, 2).ember(1).weight.device)
        facts["storage"] = [str(t.untyped_storage().ember(1).device), t.ember().untyped_storage().is_ember]
        packed = torch.nn.utils.rnn.pack_sequence([torch.ones(3), torch.ones(2)])
        facts["packed"] = packed.ember().is_ember
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            facts["typed_storage"] = str(t.storage().ember(1).device)
        try:
            torch.utils.rename_privateuse1_backend("npu")
        except RuntimeError as error:
            facts["second_name"] = str(error)
        try:
            torch.utils.generate_methods_for_privateuse1_backend()
        except RuntimeError as error:
            facts["second_methods"] = str(error)

        # A checkpoint as chapters 01-12 wrote it: its ember storage tagged "privateuseone:1".
        tag = torch.serialization.location_tag
        torch.serialization.location_tag = lambda s: "privateuseone:1" if s.device.type == "ember" else tag(s)
        old = io.BytesIO()
        torch.save({"w": torch.arange(3.0, device="ember:1")}, old)
        torch.serialization.location_tag = tag
        old.seek(0)
        try:
            torch.load(old)
        except RuntimeError as error:
            facts["old_checkpoint"] = str(error)
        old.seek(0)
        w = torch.load(old, map_location={"privateuseone:1": "ember:1"})["w"]
        facts["mapped"] = [str(w.device), w.cpu().tolist()]
        new = io.BytesIO()
        torch.save({"w": w}, new)
        new.seek(0)
        tags = []
        torch.load(new, map_location=lambda s, location: tags.append(location) or s)
        facts["new_tags"] = tags

        # A second library's kernels for operators ember registers (last: it breaks them).
        a = torch.ones(2, 2, device="ember")
        second = torch.library.Library("aten", "IMPL")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            second.impl("mm", lambda x, y: torch.zeros(len(x), y.shape[1], device=x.device), "PrivateUse1")
            second.impl("clone", lambda x, memory_format=None: x * 0, "PrivateUse1")
        dump = torch._C._dispatch_dump("aten::mm").splitlines()
        facts["override"] = {
            "warnings": [str(w.message) for w in caught],
            "mm": (a @ a).cpu().tolist(),
            "clone": a.clone().cpu().tolist(),
            "inactive": [line.split(" :: ")[0] for line in dump if line.startswith("PrivateUse1 (inactive)")],
        }
        print(json.dumps(facts))
        """
    )


def test_chapter_13_names_the_device_ember(chapter_13: dict) -> None:
    assert chapter_13["name"] == "ember"
    assert chapter_13["accelerator"] == "ember"
    assert chapter_13["module"] is True
    assert chapter_13["utils_name"] == "ember"
    assert chapter_13["profiler"] == "ProfilerActivity.EMBER"


def test_type_strings_carry_the_name_when_it_is_registered_first(chapter_13: dict) -> None:
    assert chapter_13["type"] == "torch.ember.FloatTensor"


def test_generated_methods_for_tensors_modules_packed_sequences_and_storages(chapter_13: dict) -> None:
    assert chapter_13["tensor"] == ["ember:1", True, False]
    assert chapter_13["module_method"] == "ember:1"
    assert chapter_13["storage"] == ["ember:1", True]
    assert chapter_13["typed_storage"] == "ember:1"
    assert chapter_13["packed"] is True


def test_a_second_name_and_a_second_generation_are_refused(chapter_13: dict) -> None:
    assert chapter_13["second_name"] == (
        "torch.register_privateuse1_backend() has already been set! Current backend: ember"
    )
    assert "has already been registered with is_ember" in chapter_13["second_methods"]


def test_a_checkpoint_from_before_the_rename_needs_map_location(chapter_13: dict) -> None:
    assert chapter_13["old_checkpoint"] == (
        "don't know how to restore data location of torch.storage.UntypedStorage (tagged with privateuseone:1)"
    )
    assert chapter_13["mapped"] == ["ember:1", [0.0, 1.0, 2.0]]
    assert chapter_13["new_tags"] == ["ember:1"]


# --- the C++ registration on its own ----------------------------------------------------------------

BUILD_WITHOUT_PYTHON_NAME = """
    import json, warnings
    import book
    import torch
    from book.builds import builder
    from book.run.chapter import Chapter, chapters

    {before}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        builder.build(parts=Chapter.of("renaming").parts_through(), chapter="renaming")
    name = torch._C._get_privateuse1_backend_name()
    torch._register_device_module(name, book.device_module())  # the first tensor imports torch.<name>
    print(json.dumps({{
        "name": name,
        "utils_name": torch.utils.backend_registration._privateuse1_backend_name,
        "profiler": str(torch.profiler.ProfilerActivity.PrivateUse1),
        "accelerator": str(torch.accelerator.current_accelerator()),
        "tensor": str(torch.ones(1, device=name + ":1").device),
        "old_string": str(torch.device("privateuseone:1")),
        "warnings": [str(w.message) for w in caught],
    }}))
"""


def test_the_library_registers_the_name_in_c10_when_it_loads() -> None:
    facts = child(BUILD_WITHOUT_PYTHON_NAME.format(before="pass"))
    assert facts["name"] == "ember"
    assert facts["accelerator"] == "ember"
    assert facts["tensor"] == "ember:1"
    assert facts["old_string"] == "ember:1"  # "privateuseone" still parses, as the same device type
    # Python's bookkeeping is rename_privateuse1_backend's, not c10's.
    assert facts["utils_name"] == "privateuseone"
    assert facts["profiler"] == "ProfilerActivity.PrivateUse1"


def test_a_name_already_taken_is_a_warning_not_a_crash() -> None:
    facts = child(BUILD_WITHOUT_PYTHON_NAME.format(before='torch.utils.rename_privateuse1_backend("npu")'))
    assert facts["name"] == "npu"
    assert facts["tensor"] == "npu:1"
    warning = 'ember: PrivateUse1 is already named "npu" in this process; ember\'s devices go by that name'
    assert warning in facts["stderr"] + " ".join(facts["warnings"])


def test_a_second_kernel_wins_with_one_warning_per_process(chapter_13: dict) -> None:
    # Chapter 13's claim: a second impl of a kernel ember registers replaces it, ember's stays as
    # an inactive entry, and the dispatcher warns once for all operators (mm: yes, clone: no).
    override = chapter_13["override"]
    assert len(override["warnings"]) == 1
    assert override["warnings"][0].startswith("Warning only once for all operators")
    assert "operator: aten::mm(" in override["warnings"][0]
    assert override["mm"] == [[0.0, 0.0], [0.0, 0.0]]
    assert override["clone"] == [[0.0, 0.0], [0.0, 0.0]]
    [inactive] = override["inactive"]  # ember's kernel, kept but no longer dispatched to
    assert inactive.startswith("PrivateUse1 (inactive): registered at 09_autocast.ipynb[amp_matmul]")
