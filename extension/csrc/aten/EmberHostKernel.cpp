// The boxed host kernel: any operator the CPU implements, computed by ATen's
// CPU kernel on host views of ember's memory inside one launch. The revised
// kernels of the chapters from stub_kernels to convolution send it the dtypes their loops are not
// compiled for.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "aten/EmberHostKernels.h"
#include "aten/EmberHostOwned.h"

// ember-book: begin host_kernel
namespace ember {

// onHost's check of each tensor, in PyTorch's words (its device checks say
// the same for every backend); what ember ran follows in brackets.
void checkOnDevice(const char* op, c10::Device device, const at::Tensor& t) {
  TORCH_CHECK(t.device() == device, "Expected all tensors to be on the same ",
              "device, but found at least two devices, ", device, " and ",
              t.device(), "! (ember: ", op, " runs on ", device, ")");
}

// The dtypes chapter 04's elementwise loops and reductions are compiled for.
bool loopsCompute(std::initializer_list<at::Tensor> tensors) {
  for (const at::Tensor& t : tensors) {
    const at::ScalarType type = t.scalar_type();
    if (type != at::kFloat && type != at::kDouble && type != at::kLong &&
        type != at::kBool) {
      return false;
    }
  }
  return true;
}

// For an operator whose every result is one of its written arguments (out=,
// in-place): the index of that argument for each result. Otherwise none.
std::optional<std::vector<size_t>> writtenArguments(
    const c10::FunctionSchema& schema) {
  std::vector<size_t> which;
  for (const c10::Argument& ret : schema.returns()) {
    const c10::AliasInfo* a = ret.alias_info();
    if (a == nullptr || !a->isWrite() || !ret.type()->castRaw<c10::TensorType>()) {
      return std::nullopt;
    }
    std::optional<size_t> found;
    for (size_t i = 0; i < schema.arguments().size() && !found; ++i) {
      const c10::AliasInfo* b = schema.arguments()[i].alias_info();
      if (b != nullptr && b->isWrite() && b->beforeSets() == a->beforeSets()) {
        found = i;
      }
    }
    if (!found) return std::nullopt;
    which.push_back(*found);
  }
  if (which.empty()) return std::nullopt;
  return which;
}

// An argument with fn applied to each ember tensor in it: a tensor, or the
// elements of a tensor list.
template <typename Fn>
c10::IValue mapEmberTensors(const c10::IValue& value, const Fn& fn) {
  const auto one = [&](const at::Tensor& t) -> at::Tensor {
    return t.defined() && t.is_privateuseone() ? fn(t) : t;
  };
  if (value.isTensor()) {
    return one(value.toTensor());
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> list;
    for (const at::Tensor& t : value.toTensorVector()) list.push_back(one(t));
    return list;
  }
  if (value.isOptionalTensorList()) {
    c10::List<std::optional<at::Tensor>> list;
    for (const std::optional<at::Tensor>& t : value.toOptionalTensorVector()) {
      list.push_back(t ? std::optional<at::Tensor>(one(*t)) : std::nullopt);
    }
    return list;
  }
  return value;
}

// What a recorded kernel keeps of an ember tensor: its memory, with the
// sizes and strides it has at the capture, in a TensorImpl of its own. The
// caller's tensor may change them in place afterwards (rot90 returns flip's
// result after transpose_()); a replay must not see that, as a CUDA kernel
// records its pointers and strides when it is launched.
at::Tensor frozen(const at::Tensor& t) {
  if (!t.defined() || !t.is_privateuseone()) return t;
  auto impl = c10::make_intrusive<c10::TensorImpl>(
      c10::Storage(t.storage()),
      c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), t.dtype());
  impl->set_sizes_and_strides(t.sizes(), t.strides(), t.storage_offset());
  return at::Tensor(std::move(impl));
}

// A call while the stream captures, recorded as one kernel. The operator's
// meta kernel runs now: it checks the arguments (a replay has nobody to
// raise to) and gives the results' sizes, strides and dtypes. Out= tensors
// are resized to them and new results allocated on the device before the
// launch (host views can do neither); the recorded kernel runs the CPU's
// kernel on host views and copies each new result into its tensor. Refused
// by name: an operator without a meta kernel, or whose results are neither
// new tensors nor written arguments.
void hostKernelCaptured(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                        c10::Device device) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  const auto written = writtenArguments(schema);
  for (const c10::Argument& ret : schema.returns()) {
    if (!written && (ret.alias_info() != nullptr ||
                     !ret.type()->castRaw<c10::TensorType>())) {
      refuseWhileCapturing(name.c_str(), device);
    }
  }
  const size_t first = stack->size() - schema.arguments().size();
  const std::vector<c10::IValue> arguments(stack->begin() + first, stack->end());
  std::vector<at::Tensor> tensors; // every ember tensor, for the launch
  torch::jit::Stack meta;
  for (const c10::IValue& value : arguments) {
    meta.push_back(mapEmberTensors(value, [&](const at::Tensor& t) {
      // A host view holds the plain values: the bit would be lost.
      TORCH_CHECK(!t.is_conj() && !t.is_neg(), "ember: ", name, " cannot be ",
                  "captured with a lazily conjugated or negated view on ",
                  device, "; resolve_conj() it before the capture");
      tensors.push_back(t);
      return at::empty_strided(t.sizes(), t.strides(),
                               t.options().device(c10::kMeta));
    }));
  }
  const torch::jit::Stack resized(meta); // the meta out= tensors, once run
  try {
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
  } catch (const c10::NotImplementedError&) {
    refuseWhileCapturing(name.c_str(), device);
  } catch (const c10::Error&) {
    throw; // the arguments' error, as the eager call raises it
  } catch (const std::exception&) {
    // A meta kernel in Python that cannot size its results without reading
    // the data (nonzero's raises Python's NotImplementedError).
    refuseWhileCapturing(name.c_str(), device);
  }
  std::vector<at::Tensor> results; // new results; undefined where meta's is
  if (written) {
    for (size_t i : *written) {
      at::native::resize_output(arguments[i].toTensor(),
                                resized[i].toTensor().sizes());
    }
  } else {
    for (const c10::IValue& value : meta) {
      const at::Tensor shape = value.isTensor() ? value.toTensor() : at::Tensor();
      results.push_back(shape.defined()
                            ? at::empty_strided(shape.sizes(), shape.strides(),
                                                shape.options().device(device))
                            : at::Tensor());
    }
  }
  std::vector<const at::Tensor*> pointers;
  for (const at::Tensor& t : tensors) pointers.push_back(&t);
  for (const at::Tensor& t : results) pointers.push_back(&t);
  std::vector<c10::IValue> kept; // what the kernel reads and writes, frozen
  for (const c10::IValue& value : arguments) {
    kept.push_back(mapEmberTensors(value, frozen));
  }
  std::vector<at::Tensor> kept_results;
  for (const at::Tensor& t : results) kept_results.push_back(frozen(t));
  onHostOwned(name, device, pointers,
              [op, arguments = std::move(kept),
               results = std::move(kept_results)](const HostView& host) {
                torch::jit::Stack call;
                for (const c10::IValue& value : arguments) {
                  call.push_back(mapEmberTensors(value, host));
                }
                op.redispatchBoxed(
                    c10::DispatchKeySet(c10::DispatchKey::CPU), &call);
                for (size_t j = 0; j < results.size(); ++j) {
                  if (results[j].defined()) {
                    host(results[j]).copy_(call[j].toTensor());
                  }
                }
              });
  torch::jit::drop(*stack, arguments.size());
  if (written) {
    for (size_t i : *written) stack->push_back(arguments[i]);
  } else {
    for (const at::Tensor& t : results) stack->push_back(t);
  }
}

// A boxed kernel, like chapter 03's fallback, but without its copies: the
// ember tensors among the arguments become host views of their own memory,
// the CPU's kernel for the operator runs on them inside one launch, and an
// out= result is then already in place. A new result (a functional
// operator's) is in host memory, and is copied to the device after the
// launch. The caller sizes out= tensors first (the views cannot resize).
void hostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  const size_t first = stack->size() - schema.arguments().size();
  std::vector<at::Tensor> tensors;
  std::vector<size_t> positions;
  std::optional<at::Tensor> stray; // a CPU tensor that is not a scalar
  for (size_t i = first; i < stack->size(); ++i) {
    const c10::IValue& value = (*stack)[i];
    TORCH_CHECK(!value.isTensorList() && !value.isOptionalTensorList(),
                "ember: the host kernel of ", name, " takes no tensor lists");
    if (!value.isTensor() || !value.toTensor().defined()) {
      continue;
    }
    at::Tensor t = value.toTensor();
    if (t.is_privateuseone()) {
      // A lazily conjugated or negated view (A.conj(), A.mH) holds the
      // plain values; the bit is on the tensor and a host view would drop
      // it. Inputs are resolved on the device first; outputs cannot be.
      if (t.is_conj() || t.is_neg()) {
        const c10::AliasInfo* alias = schema.arguments()[i - first].alias_info();
        TORCH_CHECK(alias == nullptr || !alias->isWrite(), "ember: ", name,
                    " cannot write into a conjugated or negated view on ",
                    t.device(), "; resolve_conj() it first");
        t = t.resolve_conj().resolve_neg();
        (*stack)[i] = t;
      }
      tensors.push_back(t);
      positions.push_back(i);
    } else if (!(t.is_cpu() && t.dim() == 0) && !stray.has_value()) {
      stray = t;
    }
  }
  TORCH_CHECK(!tensors.empty(), "ember: ", name, " reached the host kernel ",
              "without an ember tensor");
  const c10::Device device = tensors.front().device();
  // Only a CPU scalar may come along; the CPU kernel would take any other
  // CPU tensor as is, and mix devices behind the caller's back. Refused in
  // PyTorch's words (onHost's), once the ember device is known.
  TORCH_CHECK(!stray.has_value(), "Expected all tensors to be on the same ",
              "device, but found at least two devices, ", device, " and ",
              stray->device(), "! (ember: ", name, " takes ember tensors and ",
              "CPU scalars, got a ", stray->dim(), "-D tensor on ",
              stray->device(), ")");
  std::vector<const at::Tensor*> pointers;
  for (const at::Tensor& t : tensors) {
    pointers.push_back(&t);
  }
  if (const auto written = writtenArguments(schema)) {
    // An out= or in-place operator: its results are arguments, so the
    // kernel owns everything it needs (a copy of the arguments) and a
    // graph can record it and run it again in a replay.
    std::vector<c10::IValue> arguments(stack->begin() + first, stack->end());
    std::vector<size_t> slots;
    for (size_t position : positions) slots.push_back(position - first);
    std::vector<at::Tensor> kept; // frozen: a replay writes what was captured
    for (const at::Tensor& t : tensors) kept.push_back(frozen(t));
    onHostOwned(name, device, pointers,
                [op, arguments, tensors = std::move(kept),
                 slots](const HostView& host) {
                  torch::jit::Stack call(arguments);
                  for (size_t k = 0; k < tensors.size(); ++k) {
                    call[slots[k]] = host(tensors[k]);
                  }
                  op.redispatchBoxed(
                      c10::DispatchKeySet(c10::DispatchKey::CPU), &call);
                });
    std::vector<c10::IValue> returns;
    for (size_t i : *written) returns.push_back((*stack)[first + i]);
    torch::jit::drop(*stack, schema.arguments().size());
    for (c10::IValue& value : returns) stack->push_back(std::move(value));
    return;
  }
  // Eagerly a new result is made in host memory and copied to the device
  // after the launch, which a graph cannot record: while capturing, the
  // results are allocated on the device first.
  if (streamCaptures(device)) {
    hostKernelCaptured(op, stack, device);
    return;
  }
  std::vector<at::Tensor> results;
  onHost(name.c_str(), device, pointers, [&](const HostView& host) {
    std::vector<at::Tensor> views;
    for (size_t k = 0; k < tensors.size(); ++k) {
      views.push_back(host(tensors[k]));
      (*stack)[positions[k]] = views.back();
    }
    // Straight to the CPU's kernel: the dispatch keys above it (autograd,
    // autocast) have run already, for the ember call.
    op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), stack);
    // Each result: the ember tensor it is a view of (out=, in-place), or a
    // new host tensor (undefined here: copied after the launch).
    const size_t count = schema.returns().size();
    for (size_t j = stack->size() - count; j < stack->size(); ++j) {
      at::Tensor result = (*stack)[j].isTensor() ? (*stack)[j].toTensor()
                                                 : at::Tensor();
      for (size_t k = 0; k < views.size() && result.defined(); ++k) {
        if (result.is_same(views[k])) {
          (*stack)[j] = tensors[k];
          result = at::Tensor();
        }
      }
      results.push_back(result);
    }
  });
  const size_t returns_begin = stack->size() - results.size();
  for (size_t j = 0; j < results.size(); ++j) {
    if (results[j].defined()) {
      (*stack)[returns_begin + j] = results[j].to(device);
    }
  }
}

// For chapter 03's CPU fallback: while the stream of the call's ember device
// captures, the copies to the CPU and back cannot be recorded, so the call
// is recorded as the host kernel's instead. False, and nothing done, when
// nothing captures.
bool hostKernelWhileCapturing(const c10::OperatorHandle& op,
                              torch::jit::Stack* stack) {
  // Asked on every fallback call, captured or not: the first ember tensor
  // names the device, found without copying a list (mapEmberTensors would).
  std::optional<c10::Device> device;
  const auto consider = [&](const c10::IValue& value) {
    if (!device && value.isTensor() && value.toTensor().is_privateuseone()) {
      device = value.toTensor().device();
    }
  };
  for (const c10::IValue& value :
       torch::jit::last(*stack, op.schema().arguments().size())) {
    if (value.isTensorList() || value.isOptionalTensorList()) {
      for (const c10::IValue& element : value.toListRef()) consider(element);
    } else {
      consider(value);
    }
  }
  if (!device || !streamCaptures(*device)) {
    return false;
  }
  hostKernelCaptured(op, stack, *device);
  return true;
}

} // namespace ember
// ember-book: end host_kernel

// ember-book: begin layout_host_kernels
// Two operators whose default kernel for a device outside PyTorch
// (CompositeExplicitAutogradNonFunctional) returns a contiguous result for
// a channels-last input, while PyTorch's meta kernels, like the CPU's
// kernels, keep channels-last (chapter 18). The CPU's kernels run on
// ember's memory here, and their results keep their strides.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("replication_pad2d",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
  m.impl("pixel_unshuffle",
         torch::CppFunction::makeFromBoxedFunction<&ember::hostKernel>());
}
// ember-book: end layout_host_kernels

// ember-book: begin optimizer_host_ops
#include <ATen/ExpandUtils.h>
#include <ATen/native/Resize.h>

// Pointwise out= operators an optimizer's step calls (Adam's lerp, addcmul,
// addcdiv, pow, reciprocal: ember has no loops for them). The CPU fallback
// copied them to host memory and back, which a graph cannot record; the host
// kernel computes them in place, so a captured optimizer step replays. The
// out= tensors get the inputs' broadcast shape first (resize_output, as the
// CPU's kernels do), since the host views cannot resize.
namespace ember {
namespace {

void pointwiseHostKernel(const c10::OperatorHandle& op,
                         torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const size_t first = stack->size() - schema.arguments().size();
  std::optional<at::DimVector> shape;
  for (size_t i = first; i < stack->size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i - first].alias_info();
    const c10::IValue& value = (*stack)[i];
    if ((alias != nullptr && alias->isWrite()) || !value.isTensor() ||
        !value.toTensor().defined()) {
      continue;
    }
    const at::Tensor& t = value.toTensor();
    shape = shape ? at::infer_size_dimvector(*shape, t.sizes())
                  : at::DimVector(t.sizes());
  }
  for (size_t i = first; i < stack->size() && shape; ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i - first].alias_info();
    if (alias != nullptr && alias->isWrite() && (*stack)[i].isTensor()) {
      at::native::resize_output((*stack)[i].toTensor(), *shape);
    }
  }
  hostKernel(op, stack);
}

} // namespace
} // namespace ember

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name : {"lerp.Scalar_out", "addcmul.out", "addcdiv.out",
                           "pow.Scalar_out", "reciprocal.out"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<
                     &ember::pointwiseHostKernel>());
  }
}
// ember-book: end optimizer_host_ops
