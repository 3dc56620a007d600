"""PyTorch's device-generic tests, instantiated for ember.

`instantiate_device_type_tests` turns a generic test class into one class per device type it finds;
with torch_ember loaded, PyTorch's PrivateUse1TestBase is among them and names its device "ember"
(its primary device is `torch.ember.current_device()`). The test files of PyTorch's own suite (test/)
are not installed, so the generic tests here are ours, written with the same machinery: `@ops` over
OpInfos and `@modules` over ModuleInfos, which generate their samples on the device under test.

A subset runs in CI (a few seconds): OPS and MODULES below. `python test_ember_device_generic.py`
runs the same tests with unittest and prints the pass rate; EMBER_FULL_SWEEP=1 takes every OpInfo
and ModuleInfo instead of the subsets.
"""

from __future__ import annotations

import copy
import os
import sys
import unittest
from pathlib import Path
from typing import Any

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase
from torch.utils._pytree import tree_map

EXTENSION = Path(__file__).resolve().parents[2] / "extension"
if str(EXTENSION) not in sys.path:
    sys.path.append(str(EXTENSION))  # appended: the installed torch_ember stays the one imported

# The conformance sweep's judgement of which ops draw random numbers or return uninitialized memory.
from conformance import compare  # noqa: E402

FULL = os.environ.get("EMBER_FULL_SWEEP") == "1"

# A cross-section of op_db: elementwise unary and binary ops, reductions, shape and indexing ops,
# matrix products, normalizations and losses; each from a different family of kernels.
OPS = {
    "abs", "add", "addmm", "amax", "argmax", "bmm", "cat", "clamp", "cumsum", "div", "exp", "flip",
    "gather", "index_select", "log_softmax", "masked_fill", "matmul", "max.reduction_with_dim", "mean",
    "mm", "mul", "neg", "nn.functional.cross_entropy", "nn.functional.gelu", "nn.functional.layer_norm",
    "nn.functional.linear", "nn.functional.relu", "nn.functional.softmax", "permute", "pow", "reshape",
    "scatter_add", "sigmoid", "sort", "sqrt", "stack", "sub", "sum", "tanh", "topk", "transpose", "where",
    "to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce",
}  # fmt: skip
MODULES = {
    "nn.BatchNorm2d", "nn.Conv2d", "nn.Dropout", "nn.Embedding", "nn.GELU", "nn.LayerNorm", "nn.Linear",
    "nn.MaxPool2d", "nn.ReLU", "nn.Sigmoid", "nn.Softmax", "nn.Tanh", "nn.AdaptiveAvgPool2d", "nn.Flatten",
    "nn.LSTM", "nn.GRUCell",
}  # fmt: skip
SAMPLES = 3  # per op and dtype

# Ops these tests cannot judge (only EMBER_FULL_SWEEP=1 reaches them): as_strided and its kin read the
# storage around a view, which neither a non-contiguous copy nor a copy to the CPU preserves, and
# view_as_complex refuses a last dimension with a stride other than 1, on every device. A sparse sample
# has no strides to vary (noncontiguous() refuses a CSR tensor on every device): SPARSE ops skip that test.
LAYOUT_DEPENDENT = {
    "as_strided",
    "as_strided_copy",
    "as_strided_scatter",
    "as_strided.partial_views",
    "view_as_complex",
}
SPARSE = {"to_sparse", "sparse.sampled_addmm", "sparse.mm.reduce"}


def _name(info: Any) -> str:
    return f"{info.name}.{info.variant_test_name}" if getattr(info, "variant_test_name", "") else info.name


selected_ops = [op for op in op_db if FULL or _name(op) in OPS]
selected_modules = [m for m in module_db if FULL or m.name in MODULES]


def _to_cpu(value: Any) -> Any:
    return tree_map(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x, value)


def _twin(value: Any) -> Any:
    """A constructor argument for the CPU twin: tensors copied, modules (an encoder's layer) deep-copied."""
    if isinstance(value, torch.nn.Module):
        return copy.deepcopy(value).cpu()
    return _to_cpu(value)


def _on_cpu(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Constructor keyword arguments for the CPU twin, a `device` argument naming the CPU."""
    return {k: ("cpu" if k == "device" else _twin(v)) for k, v in kwargs.items()}


def _values_comparable(op: Any, cpu_sample: Any) -> bool:
    """False for ops whose values cannot agree: random draws (ember's generator is not the CPU's) and
    uninitialized memory (empty and its kin). Their shapes and dtypes are compared instead."""
    return op.name not in compare.UNINITIALIZED_OUTPUTS and not compare.draws_random(op, cpu_sample)


def _shapes(value: Any) -> Any:
    return tree_map(lambda x: (tuple(x.shape), x.dtype) if isinstance(x, torch.Tensor) else x, value)


class TestEmberGeneric(TestCase):
    """Generic tests: each runs once per device type, here on ember (device is e.g. "ember:0")."""

    @ops(selected_ops, allowed_dtypes=(torch.float32,))
    def test_matches_cpu(self, device: str, dtype: torch.dtype, op: Any) -> None:
        if _name(op) in LAYOUT_DEPENDENT:
            self.skipTest("the result depends on the storage layout")
        # Samples made on ember; the same values copied to the CPU give the reference.
        for sample in list(op.sample_inputs(device, dtype))[:SAMPLES]:
            cpu = sample.transform(lambda x: x.detach().cpu() if isinstance(x, torch.Tensor) else x)
            expected = op(cpu.input, *cpu.args, **cpu.kwargs)
            actual = op(sample.input, *sample.args, **sample.kwargs)
            if _values_comparable(op, cpu):
                self.assertEqual(_to_cpu(actual), expected, exact_device=False)
            else:
                self.assertEqual(_shapes(actual), _shapes(expected))

    @ops(selected_ops, allowed_dtypes=(torch.float32,))
    def test_noncontiguous_inputs(self, device: str, dtype: torch.dtype, op: Any) -> None:
        if _name(op) in LAYOUT_DEPENDENT | SPARSE:
            self.skipTest("the result depends on the storage layout, or the layout is sparse")
        # The same values in non-contiguous tensors must give the same result: ember's kernels and its
        # fallback's copies must honour strides.
        for sample in list(op.sample_inputs(device, dtype))[:SAMPLES]:
            strided = sample.noncontiguous()
            expected = op(sample.input, *sample.args, **sample.kwargs)
            actual = op(strided.input, *strided.args, **strided.kwargs)
            if _values_comparable(
                op, sample.transform(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x)
            ):
                self.assertEqual(actual, expected)
            else:
                self.assertEqual(_shapes(actual), _shapes(expected))

    @modules(selected_modules, allowed_dtypes=(torch.float32,))
    def test_module_forward_matches_cpu(
        self, device: str, dtype: torch.dtype, module_info: Any, training: bool
    ) -> None:
        module_inputs = module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        )
        if module_info.name.startswith("nn.Lazy"):
            self.skipTest("a lazy module's parameters exist after its first call: nothing to copy to the CPU")
        for module_input in module_inputs[:SAMPLES]:
            if module_input.forward_input is None:
                continue
            args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
            torch.manual_seed(0)
            module = module_info.module_cls(*args, **kwargs).to(device=device, dtype=dtype).train(training)
            reference = (
                module_info.module_cls(*[_twin(a) for a in args], **_on_cpu(kwargs))
                .to(dtype=dtype)
                .train(training)
            )
            reference.load_state_dict(_to_cpu(module.state_dict()))
            forward_args = module_input.forward_input.args
            forward_kwargs = module_input.forward_input.kwargs
            if module_info.name == "nn.Dropout" and training:
                continue  # ember's generator draws other masks than the CPU's
            actual = module(*forward_args, **forward_kwargs)
            expected = reference(*_to_cpu(forward_args), **_to_cpu(forward_kwargs))
            self.assertEqual(_to_cpu(actual), expected, exact_device=False)


instantiate_device_type_tests(TestEmberGeneric, globals(), only_for=("privateuse1",))

# Known failures, each with its reason. They are strict: a listed test that passes is reported as an
# unexpected success, which fails the run, so the list cannot go stale.
# (layer_norm over one element was one until native_layer_norm ran the CPU's kernel, issue 14.)
KNOWN_FAILURES: dict[str, str] = {}


def _mark_known_failures(cls: type) -> None:
    for test, _reason in KNOWN_FAILURES.items():
        setattr(cls, test, unittest.expectedFailure(getattr(cls, test)))


_mark_known_failures(globals()["TestEmberGenericPRIVATEUSE1"])


def main() -> int:
    """Run the tests with unittest and print the pass rate (the figure the conformance note quotes)."""
    suite = unittest.defaultTestLoader.loadTestsFromName(__name__ if __name__ != "__main__" else "__main__")
    result = unittest.TextTestRunner(verbosity=0, stream=sys.stderr).run(suite)
    total = result.testsRun - len(result.skipped)
    failed = len(result.failures) + len(result.errors) + len(result.expectedFailures)
    print(
        f"device-generic tests on ember: {total - failed}/{total} passed "
        f"({len(result.expectedFailures)} known failures, {len(result.skipped)} skipped)"
    )
    return 0 if not (result.failures or result.errors or result.unexpectedSuccesses) else 1


if __name__ == "__main__":
    sys.exit(main())
