// onHostOwned (chapter 15b): chapter 14's onHost for a body a graph can
// record. A header of its own, so that only the files that call it see it.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>

#include <string>
#include <utility>

#include "aten/EmberHostKernels.h"
#include "aten/EmberRecordedLaunch.h"

// ember-book: begin on_host_owned
namespace ember {

// onHost (EmberHostKernels.h) for a body that owns what it uses (it captures
// by value): a capturing stream records it, and a graph's replay runs it
// again. The operator's name is owned too: the error of a replay names it.
template <typename Body>
void onHostOwned(const std::string& op, c10::Device device,
                 c10::ArrayRef<const at::Tensor*> tensors, Body body) {
  c10::SmallVector<const void*, 8> buffers;
  for (const at::Tensor* t : tensors) {
    if (t != nullptr && t->defined() && !(t->is_cpu() && t->dim() == 0)) {
      checkOnDevice(op.c_str(), device, *t);
      buffers.push_back(t->data_ptr());
    }
  }
  launchRecorded(buffers, [op, device,
                           body = std::move(body)](ptrdiff_t offset) {
    try {
      body(HostView(offset));
    } catch (c10::Error& e) {
      e.add_context(c10::str("ember: in ", op, " on ", device));
      throw;
    }
  });
}

} // namespace ember
// ember-book: end on_host_owned
