// Turning ember driver errors into PyTorch errors.
#pragma once

#include <c10/util/Exception.h>

#include "driver/ember_driver.h"

// ember-book: begin ember_check
// Every driver call goes through EMBER_CHECK: a failure becomes a c10::Error
// (a RuntimeError in Python) that names the driver's reason, its detail (for a
// bad device index: which index and the valid range) and the call.
#define EMBER_CHECK(EXPR)                                                \
  do {                                                                   \
    const emError_t ember_error_ = (EXPR);                               \
    TORCH_CHECK(ember_error_ == emSuccess, "ember driver error: ",       \
                emGetErrorString(ember_error_),                          \
                *emGetErrorDetail(ember_error_) != '\0' ? ": " : "",     \
                emGetErrorDetail(ember_error_), " (in ", #EXPR, ")");    \
  } while (0)
// ember-book: end ember_check
