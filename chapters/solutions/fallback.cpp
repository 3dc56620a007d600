// Exercise solutions of the fallback chapter (shown by its %%cpp exercise_* cells).
// Not part of the torch_ember package: the chapter's builds compile them,
// after the chapter's own parts (they use its RegisterFallbackCheck, refuse).
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

// ember-book: begin exercise_log
namespace ember {
void logFallback(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue>) {
  TORCH_WARN("ember fallback: ", op.operator_name());
}
static const RegisterFallbackCheck register_log(&logFallback);
} // namespace ember
// ember-book: end exercise_log

// ember-book: begin exercise_abs
namespace ember {
void refuseAbs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue>) {
  if (op.operator_name().name == "aten::abs") {
    refuse(op, "this exercise says so");
  }
}
static const RegisterFallbackCheck register_abs(&refuseAbs);
} // namespace ember
// ember-book: end exercise_abs

// ember-book: begin exercise_add_only
namespace ember_exercise {
void cpuFallbackForOne(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  at::native::cpu_fallback(op, stack);
}
} // namespace ember_exercise

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.out", torch::CppFunction::makeFromBoxedFunction<
                        &ember_exercise::cpuFallbackForOne>());
}
// ember-book: end exercise_add_only
