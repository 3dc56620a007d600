"""The stride contract: every ATen call's outputs on ember have the sizes and strides FakeTensor predicts.

torch.compile plans its buffers from FakeTensor, whose kernels (meta registrations, fake_impls) say what
each operator returns for inputs on a device; Inductor's generated code then checks every extern kernel's
output with `assert_size_stride`. So a backend's kernel must return what the fake kernel predicts for the
same inputs on its device: the same sizes, the same strides in every dimension longer than 1, the same
storage offset. This sweep checks that, call by call.

`Recorder`, a dispatch mode, sees every ATen call an op's sample makes on ember (below autograd and the
composite decompositions, as Inductor's graphs see them). For each call it runs the operator first on
fake copies of the arguments (a FakeTensorMode: ember-device fake tensors), then for real, and compares
each output with PyTorch's own `torch._prims_common.compare_tensor_meta(check_strides=True)`. A call whose
fake kernel raises (no fake kernel, data-dependent output) is counted, not compared. On a difference it
runs the same call on CPU copies (strides kept) and FakeTensor on those: if the CPU differs from its own
prediction too, the difference is PyTorch's (noted in the detail), not ember's.

The samples: op_db's first SAMPLES samples of every OpInfo in float32, each in three variants (the sample
as op_db makes it; every tensor non-contiguous, `SampleInput.noncontiguous()`; every 4-D tensor
channels-last), plus `MODEL_CASES`, the attention and convolution calls of transformers and vision
models (forward and backward). A difference is named "VARIANT aten.OP.OVERLOAD" (the variant "model"
for the model cases); the expected-differences file (strides_expected.toml) lists each with its reason.
The worker processes and crash accounting are run.py's.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .compare import DEVICE, first_line
from .reasons import unit_key

VARIANTS = ("as_sampled", "noncontiguous", "channels_last")
MODEL_VARIANT = "model"
DTYPE = "float32"
# Samples per (op, variant): the CI sweep's cost (measured: see the test) grows with it.
CI_SAMPLES = 2
FULL_SAMPLES = 6
CHANNELS_LAST_SEARCH = 4
# Worker processes: fewer than the OpInfo sweep's (each imports torch and op_db, a few seconds).
CHUNKS = 2
# What the detail of a difference says when the CPU's kernel differs from its prediction too.
CPU_TOO = "the CPU returns the same, and differs from FakeTensor too"
CPU_AGREES = "the CPU agrees with FakeTensor"
CPU_OTHERWISE = "the CPU differs from FakeTensor another way"


def difference_key(variant: str, func: Any) -> str:
    return f"{variant} {func}"


# ---------------------------------------------------------------------------------------------------
# The comparison, per ATen call
# ---------------------------------------------------------------------------------------------------


def _tensor_leaves(value: Any) -> list[Any]:
    from torch.utils._pytree import tree_leaves

    return tree_leaves(value)


def _mismatch(real: Any, fake: Any) -> str | None:
    """Why the real outputs' metadata differ from the fake ones' (None if they agree)."""
    import torch
    from torch._prims_common import compare_tensor_meta

    r_leaves, f_leaves = _tensor_leaves(real), _tensor_leaves(fake)
    if len(r_leaves) != len(f_leaves):
        return f"{len(r_leaves)} outputs, FakeTensor predicts {len(f_leaves)}"
    for index, (r, f) in enumerate(zip(r_leaves, f_leaves, strict=True)):
        if isinstance(r, torch.Tensor) != isinstance(f, torch.Tensor):
            return f"output {index}: {type(r).__name__}, FakeTensor predicts {type(f).__name__}"
        if not isinstance(r, torch.Tensor) or r.layout != torch.strided or f.layout != torch.strided:
            continue
        try:
            compare_tensor_meta(r, f, check_strides=True, allow_rhs_unbacked=True)
        except Exception as error:
            sizes = f"{tuple(r.shape)} {r.stride()}, fake {tuple(f.shape)} {f.stride()}"
            return f"output {index}: {first_line(error)} [{sizes}]"
    return None


def _layouts(value: Any) -> list[Any]:
    """Sizes, strides and offset of every tensor output (None for the others)."""
    import torch

    return [
        (tuple(t.shape), t.stride(), t.storage_offset())
        if isinstance(t, torch.Tensor) and t.layout == torch.strided
        else None
        for t in _tensor_leaves(value)
    ]


def _predict(func: Any, args: Any, kwargs: Any) -> Any:
    """func's outputs on fake copies of the arguments (same device, sizes, strides, offsets)."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.utils._pytree import tree_map_only

    with FakeTensorMode() as mode:
        fake_args, fake_kwargs = tree_map_only(torch.Tensor, mode.from_tensor, (args, kwargs))
        return func(*fake_args, **fake_kwargs)


def _on_cpu(value: Any) -> Any:
    """value with every ember tensor copied to the CPU, sizes, strides and offset kept."""
    import torch
    from torch.utils._pytree import tree_map_only

    from .run import _move_tensor

    return tree_map_only(
        torch.Tensor, lambda t: _move_tensor(t, "cpu") if t.device.type == DEVICE else t, value
    )


def _checked(func: Any) -> bool:
    import torch

    skipped = (torch.Tag.dynamic_output_shape, torch.Tag.inplace_view, torch.Tag.data_dependent_output)
    return not any(tag in func.tags for tag in skipped)


class Recorder:
    """A dispatch mode comparing each ATen call on ember with FakeTensor (`differences`: key -> detail;
    `compared` and `unpredicted` count calls). `variant` names the differences it records."""

    def __init__(self, variant: str) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self
        self.variant = variant
        self.differences: dict[str, str] = {}
        self.compared = 0
        self.unpredicted = 0

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
                return outer.call(func, args, kwargs or {})

        self.mode = Mode()

    def call(self, func: Any, args: Any, kwargs: Any) -> Any:
        import torch

        on_ember = any(
            isinstance(t, torch.Tensor) and t.device.type == DEVICE for t in _tensor_leaves((args, kwargs))
        )
        if not on_ember or not _checked(func):
            return func(*args, **kwargs)
        cpu_args = _on_cpu((args, kwargs))  # before the call: an in-place call changes its inputs
        try:
            fake = _predict(func, args, kwargs)
        except Exception:
            fake = None
        real = func(*args, **kwargs)
        if fake is None:
            self.unpredicted += 1
            return real
        self.compared += 1
        why = _mismatch(real, fake)
        key = difference_key(self.variant, func)
        if why is not None and key not in self.differences:
            self.differences[key] = f"{why}; {self._on_the_cpu(func, *cpu_args, real)}"
        return real

    @staticmethod
    def _on_the_cpu(func: Any, args: Any, kwargs: Any, on_ember: Any) -> str:
        """What the same call does on the CPU: agree with its prediction, or differ as ember does."""
        try:
            fake = _predict(func, args, kwargs)
            real = func(*args, **kwargs)
        except Exception as error:
            return f"the CPU call raises: {first_line(error)}"
        if _mismatch(real, fake) is None:
            return CPU_AGREES
        return CPU_TOO if _layouts(real) == _layouts(on_ember) else CPU_OTHERWISE


# ---------------------------------------------------------------------------------------------------
# The samples and their variants
# ---------------------------------------------------------------------------------------------------


def _channels_last(t: Any) -> Any:
    import torch

    if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.dim() == 4:
        return t.contiguous(memory_format=torch.channels_last)
    return t  # SampleInput.transform passes dtypes too


def variant_of(sample: Any, variant: str) -> Any | None:
    """The sample in `variant`, or None if the variant changes no tensor of it."""
    import torch

    tensors = [
        t for t in _tensor_leaves((sample.input, sample.args, sample.kwargs)) if isinstance(t, torch.Tensor)
    ]
    if variant == "as_sampled":
        return sample
    if any(t.layout != torch.strided for t in tensors):
        return None  # sparse samples have no strides to vary
    if variant == "noncontiguous":
        return sample.noncontiguous() if any(t.numel() > 1 for t in tensors) else None
    if variant == "channels_last":
        changes = any(
            t.dim() == 4 and not t.is_contiguous(memory_format=torch.channels_last) for t in tensors
        )
        return sample.transform(_channels_last) if changes else None
    raise ValueError(f"unknown variant {variant!r}")


def run_op(op: Any, variant: str, count: int) -> dict[str, Any]:
    """One unit: op's first `count` float32 samples in `variant`, each run on ember under a Recorder."""
    import torch

    from .run import _seed_for, _to_device, op_name

    name = op_name(op)
    torch.manual_seed(_seed_for(name, "strides"))
    # Few of an op's first samples are 4-D: the channels-last variant looks further for `count` of them.
    looked_at = count * CHANNELS_LAST_SEARCH if variant == "channels_last" else count
    samples = op.sample_inputs("cpu", torch.float32, requires_grad=False)
    recorder = Recorder(variant)
    ran = 0
    for sample in itertools.islice(samples, looked_at):
        if ran == count:
            break
        changed = variant_of(sample, variant)
        if changed is None:
            continue
        try:
            op(changed.input, *changed.args, **changed.kwargs)
        except Exception:
            continue  # the sample is invalid on the CPU too
        ember_input, ember_args, ember_kwargs = _to_device(
            (changed.input, changed.args, changed.kwargs), None, DEVICE, keep_grad=False
        )
        try:
            with recorder.mode:
                op(ember_input, *ember_args, **ember_kwargs)
        except Exception:
            continue  # ember refuses the sample (the OpInfo sweep's business, not this one's)
        ran += 1
    return {
        "samples": ran,
        "compared": recorder.compared,
        "unpredicted": recorder.unpredicted,
        "differences": recorder.differences,
    }


# ---------------------------------------------------------------------------------------------------
# The model cases: attention and convolution as transformers and vision models call them
# ---------------------------------------------------------------------------------------------------


def _attention_heads(batch: int, length: int, heads: int, features: int) -> tuple[Any, ...]:
    """q, k, v of (B, H, L, E), each a transposed view of one (B, L, 3, H, E) projection."""
    import torch

    qkv = torch.randn(batch, length, 3, heads, features, device=DEVICE, requires_grad=True)
    return tuple(t.transpose(1, 2) for t in qkv.unbind(2)) + (qkv,)


def _sdpa(causal: bool, bias: bool) -> Callable[[], Any]:
    def case() -> Any:
        import torch
        import torch.nn.functional as F

        q, k, v, leaf = _attention_heads(2, 16, 4, 16)
        mask = torch.randn(1, 4, 16, 16, device=DEVICE) if bias else None
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        out.sum().backward()
        return leaf.grad

    return case


def _conv(
    images: tuple[int, ...], weight: tuple[int, ...], channels_last: bool, **kwargs: Any
) -> Callable[[], Any]:
    def case() -> Any:
        import torch
        import torch.nn.functional as F

        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(images, device=DEVICE).contiguous(memory_format=fmt).requires_grad_()
        w = torch.randn(weight, device=DEVICE).contiguous(memory_format=fmt).requires_grad_()
        b = torch.randn(weight[0], device=DEVICE, requires_grad=True)
        F.conv2d(x, w, b, **kwargs).sum().backward()
        return x.grad

    return case


def _batch_norm(training: bool, channels_last: bool) -> Callable[[], Any]:
    def case() -> Any:
        import torch
        import torch.nn.functional as F

        fmt = torch.channels_last if channels_last else torch.contiguous_format
        x = torch.randn(4, 8, 6, 6, device=DEVICE).contiguous(memory_format=fmt).requires_grad_()
        mean, var = torch.zeros(8, device=DEVICE), torch.ones(8, device=DEVICE)
        weight = torch.ones(8, device=DEVICE, requires_grad=True)
        F.batch_norm(x, mean, var, weight, training=training).sum().backward()
        return x.grad

    return case


def _image_op(fn: Callable[[Any], Any], shape: tuple[int, ...], fmt: str) -> Callable[[], Any]:
    """fn on an image batch in layout `fmt` ("channels_last" or "noncontiguous"), with its backward."""

    def case() -> Any:
        import torch

        x = torch.randn(shape, device=DEVICE)
        if fmt == "channels_last":
            x = x.contiguous(memory_format=torch.channels_last)
        else:  # every other column of a wider tensor
            x = torch.randn(*shape[:-1], 2 * shape[-1], device=DEVICE)[..., ::2]
        x.requires_grad_()
        fn(x).sum().backward()
        return x.grad

    return case


def _pad(mode: str, padding: tuple[int, ...]) -> Callable[[Any], Any]:
    import torch.nn.functional as F

    return lambda x: F.pad(x, padding, mode=mode)


def _unshuffle(x: Any) -> Any:
    import torch.nn.functional as F

    return F.pixel_unshuffle(x, 2)


def _conv_transpose(x: Any) -> Any:
    import torch
    import torch.nn.functional as F

    weight = torch.randn(x.shape[1], 4, 3, 3, device=DEVICE)
    return F.conv_transpose2d(x, weight.contiguous(memory_format=torch.channels_last), stride=2)


# name -> a function running the case on ember (forward and backward)
MODEL_CASES: dict[str, Callable[[], Any]] = {
    "sdpa.causal_head_view": _sdpa(causal=True, bias=False),
    "sdpa.bias_head_view": _sdpa(causal=False, bias=True),
    "conv2d.patch_embedding": _conv((2, 3, 16, 16), (64, 3, 4, 4), False, stride=4),
    "conv2d.patch_embedding_channels_last": _conv((2, 3, 16, 16), (64, 3, 4, 4), True, stride=4),
    "conv2d.3x3_channels_last": _conv((2, 8, 10, 10), (16, 8, 3, 3), True, padding=1),
    "conv2d.depthwise_channels_last": _conv((2, 8, 10, 10), (8, 1, 3, 3), True, padding=1, groups=8),
    "batch_norm.eval_channels_last": _batch_norm(training=False, channels_last=True),
    "batch_norm.train_channels_last": _batch_norm(training=True, channels_last=True),
    "conv_transpose2d.channels_last": _image_op(_conv_transpose, (2, 8, 6, 6), "channels_last"),
    "pad.replicate_channels_last": _image_op(_pad("replicate", (1, 2, 2, 1)), (2, 8, 6, 6), "channels_last"),
    "pad.negative_channels_last": _image_op(_pad("constant", (-1, 2, -2, 1)), (2, 8, 6, 6), "channels_last"),
    "pad.replicate_negative_channels_last": _image_op(
        _pad("replicate", (-1, 2, -2, 1)), (2, 8, 6, 6), "channels_last"
    ),
    "pad.negative_noncontiguous": _image_op(_pad("constant", (-1, 2, -2, 1)), (2, 8, 6, 6), "noncontiguous"),
    "pixel_unshuffle.channels_last": _image_op(_unshuffle, (2, 8, 6, 6), "channels_last"),
}


def run_model_case(name: str) -> dict[str, Any]:
    import torch

    from .run import _seed_for

    torch.manual_seed(_seed_for(name, "strides"))
    recorder = Recorder(MODEL_VARIANT)
    with recorder.mode:
        MODEL_CASES[name]()
    return {
        "samples": 1,
        "compared": recorder.compared,
        "unpredicted": recorder.unpredicted,
        "differences": recorder.differences,
    }


# ---------------------------------------------------------------------------------------------------
# The worker's units
# ---------------------------------------------------------------------------------------------------


def units(chunk: int, chunks: int) -> Iterator[tuple[str, str, Callable[[int], dict[str, Any]]]]:
    """(variant, name, run(count)) for one chunk: the OpInfos round robin, the model cases in chunk 0."""
    import os

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from .run import ONLY_ENV, op_name

    only = set(filter(None, os.environ.get(ONLY_ENV, "").split(",")))
    for index, op in enumerate(op_db):
        name = op_name(op)
        if index % chunks != chunk or (only and name not in only):
            continue
        if torch.float32 not in op.supported_dtypes("cpu"):
            continue
        for variant in VARIANTS:
            yield variant, name, lambda count, op=op, variant=variant: run_op(op, variant, count)
    if chunk == 0:
        for name in MODEL_CASES:
            if not only or name in only:
                yield MODEL_VARIANT, name, lambda _count, name=name: run_model_case(name)


def worker(chunk: int, chunks: int, samples: int, resume_after: str | None, out: Path) -> None:
    """Run one chunk's units, one JSON line each ("start" first), as run.worker does for the OpInfo sweep."""
    import os
    import warnings

    import torch

    import torch_ember  # noqa: F401 (loads the backend when autoload is off)

    from .run import ABORT_ENV

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    skipping = resume_after is not None
    with out.open("a", encoding="utf-8") as stream:
        for variant, name, run in units(chunk, chunks):
            key = unit_key(variant, name, DTYPE)
            if skipping:
                skipping = key != resume_after
                continue
            stream.write(json.dumps({"start": key}) + "\n")
            stream.flush()
            if os.environ.get(ABORT_ENV) == key:
                os.abort()
            try:
                found = run(samples)
                status, detail = ("pass" if found["samples"] else "skip"), ""
            except Exception as error:  # the sweep's own code failed around the op
                found, status, detail = {}, "fail", f"sweep: {first_line(error)}"
            record = {"kind": variant, "op": name, "dtype": DTYPE, "status": status, "detail": detail}
            stream.write(json.dumps({**record, "metadata_only": False, **found}) + "\n")
            stream.flush()
