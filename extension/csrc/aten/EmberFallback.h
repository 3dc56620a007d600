// The CPU fallback (EmberFallback.cpp), for kernels that hand a call to it
// themselves: an ember kernel whose loops are not compiled for a dtype (say,
// complex) can run that call on the CPU the way an operator without any ember
// kernel does, with at::native::call_fallback_fn<&ember::cpuFallback, ...>.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace ember {

// The boxed kernel registered for every operator at PrivateUse1: runs the
// fallback's rules, then ATen's cpu_fallback.
void cpuFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

} // namespace ember
