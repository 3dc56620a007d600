// The CPU fallback: every operator without an ember kernel runs on the CPU,
// with its tensors copied there and back. Plus the rules that stop the calls
// a CPU round trip would get wrong.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <c10/core/Device.h>
#include <torch/library.h>

#include <optional>
#include <string>
#include <vector>

// ember-book: begin cpu_fallback
namespace ember {

// A rule that decides whether a call may fall back to the CPU: it raises if
// not. The cells after this one add rules; each registers itself here.
using FallbackCheck = void (*)(const c10::OperatorHandle& op,
                               c10::ArrayRef<c10::IValue> arguments);

std::vector<FallbackCheck>& fallbackChecks() {
  // Constructed on first use, so registering from any static initializer,
  // in any order, is safe.
  static std::vector<FallbackCheck> checks;
  return checks;
}

struct RegisterFallbackCheck {
  explicit RegisterFallbackCheck(FallbackCheck check) {
    fallbackChecks().push_back(check);
  }
};

// Chapter 15b's route for a call made while a stream captures (defined with
// the host kernel, EmberHostKernel.cpp).
bool hostKernelWhileCapturing(const c10::OperatorHandle& op,
                              torch::jit::Stack* stack);

// A boxed kernel: the dispatcher hands over the operator and a stack whose
// last entries are its arguments; the results must replace them.
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::ArrayRef<c10::IValue> arguments =
      torch::jit::last(*stack, op.schema().arguments().size());
  for (const FallbackCheck check : fallbackChecks()) {
    check(op, arguments);
  }
  // A capturing stream cannot record the round trip through host memory;
  // the host kernel (EmberHostKernel.cpp) runs the call in one recordable
  // launch instead, when a stream captures.
  if (hostKernelWhileCapturing(op, stack)) {
    return;
  }
  // ATen's generic fallback: copy the tensor arguments to the CPU, run the
  // CPU kernel, copy mutated arguments back into the ember tensors, and move
  // the results to the device of the first tensor argument.
  at::native::cpu_fallback(op, stack);
}

} // namespace ember

// `_`: all operators of all namespaces. One fallback per dispatch key: the
// dispatcher uses it for every operator with nothing registered at PrivateUse1.
TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
}
// ember-book: end cpu_fallback

// ember-book: begin fallback_blocklist
namespace ember {

// Operators that must never run on the CPU behind ember's back. A name
// without an overload ("aten::set_") covers every overload.
struct BlockedOperator {
  const char* name;
  const char* reason;
};

constexpr const char* kMovesTensors =
    "the CPU fallback moves tensors between ember and the CPU with it: "
    "ember must implement it itself (chapter 02)";
constexpr const char* kSharesMemory =
    "it makes a tensor share another tensor's memory, and a CPU copy cannot "
    "share ember memory";
constexpr const char* kDrawsRandom =
    "it draws random numbers: on the CPU they would come from the CPU's "
    "generator, so ember's seed and random state would not govern them";

constexpr BlockedOperator kBlockedOperators[] = {
    {"aten::empty.memory_format", kMovesTensors},
    {"aten::empty_strided", kMovesTensors},
    {"aten::_copy_from", kMovesTensors},
    {"aten::_copy_from_and_resize", kMovesTensors},
    {"aten::resize_", kMovesTensors},
    {"aten::set_", kSharesMemory},
    // Random, but without a Generator argument for the rule below to see.
    {"aten::native_dropout", kDrawsRandom},
};

// Returns Tensor(a) for an input Tensor(a): a view (see the schema's alias
// annotations). Out= and in-place results are Tensor(a!), writes, and fine.
bool returnsView(const c10::FunctionSchema& schema) {
  for (const c10::Argument& result : schema.returns()) {
    const c10::AliasInfo* alias = result.alias_info();
    if (alias != nullptr && !alias->isWrite()) {
      return true;
    }
  }
  return false;
}

bool takesGenerator(const c10::FunctionSchema& schema) {
  for (const c10::Argument& argument : schema.arguments()) {
    c10::TypePtr type = argument.type();
    if (const auto optional = type->cast<c10::OptionalType>()) {
      type = optional->getElementType();
    }
    if (type->kind() == c10::TypeKind::GeneratorType) {
      return true;
    }
  }
  return false;
}

void refuse(const c10::OperatorHandle& op, const char* reason) {
  TORCH_CHECK(false, "ember: ", op.operator_name(), " has no ember kernel and ",
              "cannot fall back to the CPU because ", reason);
}

void checkBlocklist(const c10::OperatorHandle& op,
                    c10::ArrayRef<c10::IValue> /*arguments*/) {
  const c10::OperatorName& name = op.operator_name();
  const std::string full = c10::toString(name);
  for (const BlockedOperator& blocked : kBlockedOperators) {
    if (full == blocked.name || name.name == blocked.name) {
      refuse(op, blocked.reason);
    }
  }
  if (returnsView(op.schema())) {
    refuse(op, "it returns a view of its input, and a CPU copy cannot share "
               "the ember tensor's memory: writes through the result would "
               "be lost");
  }
  if (takesGenerator(op.schema())) {
    refuse(op, kDrawsRandom);
  }
}

static const RegisterFallbackCheck register_blocklist(&checkBlocklist);

} // namespace ember
// ember-book: end fallback_blocklist

// ember-book: begin fallback_one_device
namespace ember {

// cpu_fallback's registry of rules (above), declared again: the book builds
// this part apart from the one that defines it.
using FallbackCheck = void (*)(const c10::OperatorHandle& op,
                               c10::ArrayRef<c10::IValue> arguments);
std::vector<FallbackCheck>& fallbackChecks();

// cpu_fallback puts every result on the device of the first tensor argument,
// whatever the others are on. Operators without a device check of their own
// (mm, cat, where, ...) would silently combine two ember devices. CPU tensors
// may still come along (0-dim scalars, index tensors), as with CUDA.
void checkOneEmberDevice(const c10::OperatorHandle& op,
                         c10::ArrayRef<c10::IValue> arguments) {
  std::optional<c10::Device> first;
  const auto visit = [&](const at::Tensor& tensor) {
    if (!tensor.defined() || !tensor.is_privateuseone()) {
      return;
    }
    if (!first.has_value()) {
      first = tensor.device();
      return;
    }
    // PyTorch's words first: its tests and its users match on them.
    TORCH_CHECK(tensor.device() == *first, "Expected all tensors to be on the "
                "same device, but found at least two devices, ", *first,
                " and ", tensor.device(), "! (ember: ", op.operator_name(),
                " would run on the CPU and return its result on ", *first,
                " alone; move the tensors to one device first)");
  };
  for (const c10::IValue& value : arguments) {
    if (value.isTensor()) {
      visit(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorVector()) {
        visit(tensor);
      }
    } else if (value.isOptionalTensorList()) {
      for (const std::optional<at::Tensor>& tensor :
           value.toOptionalTensorVector()) {
        if (tensor.has_value()) {
          visit(*tensor);
        }
      }
    }
  }
}

static const bool one_device_registered =
    (fallbackChecks().push_back(&checkOneEmberDevice), true);

// The same rule picks the CPU when the first tensor argument is a CPU
// tensor: conv2d(cpu_input, ember_weight) reached the fallback (through
// _slow_conv2d_forward, the CPU's convolution for a CPU input, dispatched
// to ember by the weight) and returned the CPU's result, no error. CUDA's
// kernels refuse such a call in PyTorch's words; so does ember. A CPU
// scalar may still come first, and a Device argument picks the device
// itself. Arguments the operator writes (out=, self of an in-place op) are
// the next rule's: there the result is that tensor, wherever it lives.
void checkResultOnEmber(const c10::OperatorHandle& op,
                        c10::ArrayRef<c10::IValue> arguments) {
  const c10::FunctionSchema& schema = op.schema();
  std::optional<at::Tensor> picked; // the tensor cpu_fallback's rule picks
  std::optional<c10::Device> ember;
  const auto visit = [&](const at::Tensor& tensor, bool plain) {
    if (!tensor.defined()) {
      return;
    }
    if (!ember.has_value() && tensor.is_privateuseone()) {
      ember = tensor.device();
    }
    if (plain && !picked.has_value()) {
      picked = tensor;
    }
  };
  std::optional<at::Tensor> first_in_list;
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::IValue& value = arguments[i];
    if (value.isDevice()) {
      return;
    }
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      continue;
    }
    if (value.isTensor()) {
      visit(value.toTensor(), true);
    } else if (value.isTensorList()) {
      for (const at::Tensor& tensor : value.toTensorVector()) {
        visit(tensor, false);
        if (!first_in_list.has_value() && tensor.defined()) {
          first_in_list = tensor;
        }
      }
    }
  }
  if (!picked.has_value()) {
    picked = first_in_list; // no plain tensor: the first in a list
  }
  if (!ember.has_value() || !picked.has_value() ||
      picked->is_privateuseone() || (picked->is_cpu() && picked->dim() == 0)) {
    return;
  }
  TORCH_CHECK(false, "Expected all tensors to be on the same device, but ",
              "found at least two devices, ", *ember, " and ",
              picked->device(), "! (ember: ", op.operator_name(), " would ",
              "run on the CPU and return its result on ", picked->device(),
              ", the device of its first tensor argument)");
}

static const bool result_registered =
    (fallbackChecks().push_back(&checkResultOnEmber), true);

// An out= (or in-place) tensor on another device than the ember inputs:
// cpu_fallback would compute on the CPU and then copy the result back with
// _copy_from_and_resize dispatched on the out= tensor's device, which for a
// CPU tensor has no kernel (a NotImplementedError about the CPU backend).
// CUDA refuses such a call up front, in the words of every device check
// PyTorch generates ("Expected all tensors to be on the same device"); so do
// we, and say which argument after them.
void checkOutputsOnEmber(const c10::OperatorHandle& op,
                         c10::ArrayRef<c10::IValue> arguments) {
  const c10::FunctionSchema& schema = op.schema();
  std::optional<c10::Device> ember;
  for (const c10::IValue& value : arguments) {
    std::vector<at::Tensor> tensors;
    if (value.isTensor()) {
      tensors.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      tensors = value.toTensorVector(); // cat's inputs
    }
    for (const at::Tensor& tensor : tensors) {
      if (!ember.has_value() && tensor.defined() && tensor.is_privateuseone()) {
        ember = tensor.device();
      }
    }
  }
  if (!ember.has_value()) {
    return;
  }
  for (size_t i = 0; i < arguments.size(); ++i) {
    const c10::AliasInfo* alias = schema.arguments()[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) {
      continue;
    }
    std::vector<at::Tensor> written;
    if (arguments[i].isTensor()) {
      written.push_back(arguments[i].toTensor());
    } else if (arguments[i].isTensorList()) {
      written = arguments[i].toTensorVector();
    }
    for (const at::Tensor& tensor : written) {
      TORCH_CHECK(!tensor.defined() || tensor.device() == *ember,
                  "Expected all tensors to be on the same device, but found "
                  "at least two devices, ", *ember, " and ", tensor.device(),
                  "! (ember: ", op.operator_name(), " writes into '",
                  schema.arguments()[i].name(), "' on ", tensor.device(),
                  ", its inputs are on ", *ember, ")");
    }
  }
}

static const bool outputs_registered =
    (fallbackChecks().push_back(&checkOutputsOnEmber), true);

} // namespace ember
// ember-book: end fallback_one_device

// ember-book: begin fallback_allclose
// allclose's default kernel (CompositeExplicitAutograd) is a dozen operators
// (isclose's arithmetic, then all, then item), each of which would fall back
// on its own. Registered as allclose's PrivateUse1 kernel, the same fallback
// takes precedence over that default and runs allclose as one CPU call.
//
// mse_loss and smooth_l1_loss need the same for another reason. Their
// default kernel (CompositeExplicitAutogradNonFunctional) allocates the 0-dim
// loss and calls the out= operator with it. The CPU's out= kernel first
// treats its out= tensor as the elementwise loss, of the inputs' shape, then
// resizes it back: it warns "An output with one or more elements was
// resized", for the CPU's own tensors too. The CPU's functional kernels
// allocate their own result and never warn; registered here, the fallback
// runs them.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("allclose",
         torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
  m.impl("mse_loss",
         torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
  m.impl("smooth_l1_loss",
         torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
}
// ember-book: end fallback_allclose

// ember-book: begin fallback_index
// Indexing with a uint8 mask (x[mask]) warns that uint8 masks are deprecated,
// once on the CPU. index.Tensor's default kernel (CompositeExplicitAutograd-
// NonFunctional) runs its meta function, which converts the mask (and
// warns), and then calls index.Tensor_out with the original indices: on
// ember that out= operator falls back to the CPU, whose meta function
// converts the mask again and warns a second time. Registered as
// index.Tensor's PrivateUse1 kernel, the fallback runs the CPU's functional
// kernel in one call: one conversion, one warning, as on the CPU.
namespace ember {
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);
} // namespace ember

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("index.Tensor",
         torch::CppFunction::makeFromBoxedFunction<&ember::cpuFallback>());
}
// ember-book: end fallback_index
