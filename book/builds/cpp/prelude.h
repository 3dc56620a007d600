// The headers every chapter's backend is compiled against.
//
// book.build() precompiles this file once per machine (a GCC precompiled
// header) and puts `#include "prelude.h"` at the top of the generated
// translation unit, so a chapter's cells compile in a couple of seconds
// instead of re-parsing PyTorch's headers on every build. It is deliberately
// slim: <torch/extension.h> (pybind11 plus every ATen function) costs ~20 s to
// parse, and a PCH of it is ~800 MB, which is slow to load again.
#pragma once

// Dispatcher registration: TORCH_LIBRARY, TORCH_LIBRARY_IMPL, boxed kernels.
#include <torch/library.h>

// Tensors, storage, allocators, device guards.
#include <ATen/core/Tensor.h>
#include <ATen/EmptyTensor.h>
#include <ATen/InferSize.h>
#include <ATen/TensorUtils.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

// Device-agnostic pieces of ATen that a backend reuses for its minimal ops.
#include <ATen/native/CPUFallback.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/_copy_from.h>
#include <ATen/ops/_copy_from_and_resize.h>
#include <ATen/ops/_local_scalar_dense_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/view_native.h>

// Hooks and observers used by later chapters and by the book's trace probe.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/record_function.h>

// Chapter 02: copy_ rules (no internal or partial overlap) for _copy_from.
#include <ATen/MemoryOverlap.h>

// Chapter 04: TensorIterator, DispatchStub and the stubs a backend fills.
#include <ATen/Dispatch.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/TensorIterator.h>
// Chapter 04: the stubs ember fills, and ATen's classes and out= functions
// for the operators whose stubs they are.
#include <ATen/AccumulateType.h>
#include <ATen/native/Activation.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/Fill.h>
#include <ATen/native/ReduceOps.h>
#include <ATen/native/TensorCompare.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs_native.h>
#include <ATen/ops/add_native.h>
#include <ATen/ops/clamp_min_native.h>
#include <ATen/ops/cos_native.h>
#include <ATen/ops/div_native.h>
#include <ATen/ops/eq_native.h>
#include <ATen/ops/exp_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/ge_native.h>
#include <ATen/ops/gt_native.h>
#include <ATen/ops/le_native.h>
#include <ATen/ops/log_native.h>
#include <ATen/ops/lt_native.h>
#include <ATen/ops/mean_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/ne_native.h>
#include <ATen/ops/neg_native.h>
#include <ATen/ops/relu_native.h>
#include <ATen/ops/rsqrt_native.h>
#include <ATen/ops/sigmoid_native.h>
#include <ATen/ops/sin_native.h>
#include <ATen/ops/sqrt_native.h>
#include <ATen/ops/sub_native.h>
#include <ATen/ops/sum_native.h>
#include <ATen/ops/tanh_native.h>
#include <ATen/ops/threshold_backward_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/zero_native.h>
// Chapters 05 and 06: at::parallel_for, for the matrix and convolution kernels.
#include <ATen/Parallel.h>

// Chapter 07: custom operators.

// Chapter 09: autocast. The wrapper templates, cached_cast and the list
// macros (KERNEL_PRIVATEUSEONE, AT_FORALL_*); it includes ATen/ATen.h, most
// of which the headers above already pulled in.
#include <ATen/autocast_mode.h>

// Chapter 10: random number generators.

// Chapter 11: streams and events.

// Chapter 12: serialization and storages.

// Chapter 13: renaming.

// Chapter 08: autograd. Only in the units that use torch::autograd: book.builds.units
// compiles those with EMBER_BOOK_AUTOGRAD, against a second precompiled
// header. These headers would double every other unit's fixed cost (GCC
// instantiates a PCH's pending templates in each unit that includes it).
#ifdef EMBER_BOOK_AUTOGRAD
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#endif
