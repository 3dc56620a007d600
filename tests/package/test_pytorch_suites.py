"""extension/conformance/pytorch_suites.py: how PyTorch's test files' results on ember and on the CPU
are matched, compared and classified. The runs themselves need PyTorch's test files, which this
repository does not carry; these tests feed the reader JUnit XML shaped like pytest's."""

from __future__ import annotations

import sys
from pathlib import Path

EXTENSION = Path(__file__).resolve().parents[2] / "extension"
if str(EXTENSION) not in sys.path:
    sys.path.append(str(EXTENSION))  # appended: the installed torch_ember stays the one imported

from conformance import pytorch_suites as suites  # noqa: E402

SPARSE = (
    "NotImplementedError: Could not run 'aten::_sparse_coo_tensor_with_dims_and_tensors' with arguments "
    "from the 'Sparseember' backend."
)


def junit(path: Path, classname: str, cases: list[tuple[str, str, str]]) -> Path:
    """cases: (name, status, text); status passed, failure, error or skipped."""
    rows = []
    for name, status, text in cases:
        inner = "" if status == "passed" else f'<{status} message="{text}">{text}</{status}>'
        rows.append(f'<testcase classname="{classname}" name="{name}">{inner}</testcase>')
    path.write_text(f"<testsuites><testsuite>{''.join(rows)}</testsuite></testsuites>")
    return path


def test_the_device_part_of_a_name_is_the_last_one_before_a_dtype_or_the_end() -> None:
    assert suites.base_name("test_flip_ember_float32", "ember") == "test_flip_float32"
    assert suites.base_name("test_flip_cpu_float32", "cpu") == "test_flip_float32"
    assert suites.base_name("test_sum_cpu_device_mismatch_cpu", "cpu") == "test_sum_cpu_device_mismatch"
    assert suites.base_name("test_sum_cpu_device_mismatch_ember", "ember") == "test_sum_cpu_device_mismatch"
    assert suites.class_base("test_view_ops.TestOldViewOpsEMBER") == "TestOldViewOps"
    assert suites.class_base("test_x.TestFooPRIVATEUSE1") == suites.class_base("test_x.TestFooCPU")


def test_only_failures_the_cpu_passes_are_ember_only_and_each_has_a_reason(tmp_path: Path) -> None:
    ember = junit(
        tmp_path / "e.xml",
        "test_x.TestFooPRIVATEUSE1",
        [
            ("test_a_ember_float32", "passed", ""),
            ("test_b_ember", "failure", SPARSE),
            ("test_c_ember", "failure", "AssertionError: Scalars are not equal! self.assertEqual(len(w), 2)"),
            ("test_d_ember", "skipped", "Only runs on cpu"),
            ("test_e_ember_int64", "failure", "AssertionError: Tensor-likes are not close!"),
        ],
    )
    cpu = junit(
        tmp_path / "c.xml",
        "test_x.TestFooCPU",
        [
            ("test_a_cpu_float32", "passed", ""),
            ("test_b_cpu", "passed", ""),
            ("test_c_cpu", "passed", ""),
            ("test_d_cpu", "passed", ""),
            ("test_e_cpu_int64", "failure", "AssertionError: Tensor-likes are not close!"),
        ],
    )
    result = suites.FileResult("test_x.py")
    result.runs = {"ember": suites.read_junit(ember, "ember"), "cpu": suites.read_junit(cpu, "cpu")}
    summary = suites.summarize(result)
    assert summary["run"] == {"ember": 4, "cpu": 5}
    assert summary["failed"] == {"ember": 3, "cpu": 1}
    assert summary["skipped_on_ember_passed_on_cpu"] == 1
    reasons = {key: info["reason"] for key, info in summary["ember_only"].items()}
    assert reasons == {
        "TestFoo::test_b": "missing kernel",
        "TestFoo::test_c": "warning count",
    }  # test_e fails on both devices: not ember's


def test_a_verified_case_is_named_before_the_generic_rules() -> None:
    reason = suites.classify("TestReductions::test_sum_vs_numpy_float32", "Tensor-likes are not close!")
    assert reason.startswith("known: numpy's float32 sum")
    assert suites.classify("TestFoo::test_x", "Tensor-likes are not close!") == "wrong value"
    assert suites.classify("TestFoo::test_x", "Could not run 'aten::mode' with arguments") == "missing kernel"
    assert suites.classify("TestFoo::test_x", '"same device" does not match "ember"') == "error wording"
    assert suites.classify("TestFoo::test_x", "something else") == "unclassified"


def test_sparse_and_quantized_tensors_are_no_longer_layouts_ember_lacks() -> None:
    # Ember has sparse and quantized tensors (extension/csrc/sparse/, quantized/): a test of either that
    # fails on ember alone is a missing kernel, which the script reports, not an accepted layout gap.
    text = "NotImplementedError: Could not run 'aten::relu' with arguments from the 'Quantizedember' backend."
    assert suites.classify("TestFoo::test_x", text) == "missing kernel"
    assert suites.classify("TestFoo::test_y", SPARSE) == "missing kernel"
