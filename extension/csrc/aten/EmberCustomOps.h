// ember's own operators (the custom_ops chapter): what other files need to call them.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

// ember-book: begin custom_abs_handle
namespace ember {

// The typed handle of ember::custom_abs, looked up once (EmberCustomOps.cpp).
// A header part: chapter 08's autograd kernel and chapter 09's autocast
// wrapper, in other files, call the operator through it too.
const c10::TypedOperatorHandle<at::Tensor(const at::Tensor&)>& customAbsOp();

} // namespace ember
// ember-book: end custom_abs_handle
