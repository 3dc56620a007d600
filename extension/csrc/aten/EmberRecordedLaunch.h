// A kernel launch a graph can record (chapter 15b): ember::launchRecorded,
// beside chapter 4's ember::launch, which runs in place and which a
// capturing stream refuses.
#pragma once

#include <ATen/native/TensorIterator.h>
#include <c10/core/Device.h>
#include <c10/core/DeviceGuard.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <array>
#include <exception>
#include <memory>
#include <type_traits>

#include "aten/EmberLaunch.h"

// ember-book: begin recorded_launch
namespace ember {

// The recordable form of launch(): body(offset) runs inside the driver's
// recordable launch, on the current device's current stream, under
// launch()'s rules (the buffers, the offset, exceptions carried out). One
// more: the body owns what it uses (it captures by value: tensors,
// iterators, scalars), because a capturing stream records a copy of it and
// a graph replays that copy after the caller has returned. Eagerly the body
// runs in place and is never copied: the driver asks for the copy only
// while capturing.
template <typename Body>
void launchRecorded(c10::ArrayRef<const void*> buffers, const Body& body) {
  static_assert(std::is_copy_constructible_v<Body>,
                "an ember kernel's body is copied into a graph when captured");
  struct Call {
    const Body* body;
    std::exception_ptr error;
    bool recorded; // a graph's copy: nobody is there to rethrow
    static void run(void* arg) {
      auto* self = static_cast<Call*>(arg);
      try {
        ptrdiff_t offset = 0;
        EMBER_CHECK(emGetKernelOffset(&offset));
        (*self->body)(offset);
      } catch (const std::exception& e) {
        if (!self->recorded) {
          self->error = std::current_exception();
        } else {
          TORCH_WARN("ember: a kernel failed while a graph replayed: ",
                     e.what());
        }
      } catch (...) {
        if (!self->recorded) self->error = std::current_exception();
      }
    }
  };
  // The copy a graph keeps: the body and everything it owns.
  struct Recorded : Call {
    Body own;
    explicit Recorded(const Body& b) : Call{nullptr, nullptr, true}, own(b) {
      this->body = &own;
    }
    static void* clone(const void* arg) {
      const Call* call = static_cast<const Call*>(arg);
      return static_cast<Call*>(new Recorded(*call->body));
    }
    static void destroy(void* copy) {
      delete static_cast<Recorded*>(static_cast<Call*>(copy));
    }
  };
  Call call{&body, nullptr, false};
  EMBER_CHECK(emLaunchKernelRecordable(
      &Call::run, &call, &Recorded::clone, &Recorded::destroy,
      const_cast<void* const*>(buffers.data()), buffers.size()));
  if (call.error) {
    std::rethrow_exception(call.error);
  }
}

// Whether the device's current stream captures (its launches are recorded).
inline bool streamCaptures(c10::Device device) {
  emStream_t stream = 0;
  int capturing = 0;
  EMBER_CHECK(emGetStream(device.index(), &stream));
  EMBER_CHECK(emStreamIsCapturing(device.index(), stream, &capturing));
  return capturing != 0;
}

// For work that cannot be recorded (a random kernel, an operator without a
// meta kernel): while the device's current stream captures, makes an in-place
// launch, which the driver refuses, invalidating the capture as CUDA does,
// and raises CUDA's error with the operator's name.
inline void refuseWhileCapturing(const char* op, c10::Device device) {
  if (streamCaptures(device)) {
    const c10::DeviceGuard guard(device);
    const emError_t error = emLaunchKernel([](void*) {}, nullptr, nullptr, 0);
    TORCH_CHECK(false, "ember: ", op,
                ": operation not permitted when stream is capturing (",
                emGetErrorDetail(error), ")");
  }
}

// An iterator a recorded kernel keeps: a copy whose operands own their
// tensors (TensorIterator may borrow the caller's; a replay comes later).
inline std::shared_ptr<at::TensorIterator> ownedCopy(
    const at::TensorIteratorBase& iter) {
  auto copy = std::make_shared<at::TensorIterator>(iter);
  for (int i = 0; i < copy->ntensors(); ++i) {
    at::OperandInfo& operand = copy->operand(i);
    operand.tensor(c10::MaybeOwned<at::TensorBase>::owned(
        std::in_place, operand.tensor_base()));
  }
  return copy;
}

// body(iter, operands): the STUB kernel's loop over the iterator it is
// given (the caller's eagerly, the graph's own copy in a replay).
template <typename Body>
void launchRecorded(const char* op, const at::TensorIteratorBase& iter,
                    const Body& body) {
  const int count = iter.ntensors();
  TORCH_CHECK(count <= KernelOperands::kMax, "ember: ", op, " has ", count,
              " operands; the kernel launcher takes at most ",
              KernelOperands::kMax);
  c10::SmallVector<const void*, KernelOperands::kMax> buffers;
  std::array<bool, KernelOperands::kMax> on_device{};
  for (int i = 0; i < count; ++i) {
    on_device[i] = iter.device(i).is_privateuseone();
    if (on_device[i]) {
      buffers.push_back(iter.data_ptr(i)); // interior pointers are fine
    } else {
      // TensorIterator has refused any other mix of devices already.
      TORCH_CHECK(iter.is_cpu_scalar(i), "ember: ", op, " got an operand on ",
                  iter.device(i), " next to ember tensors");
    }
  }
  // Refers to the caller's iterator and body; a copy (made only when a
  // graph records the launch) owns copies of both.
  struct IterKernel {
    at::TensorIteratorBase* iter; // for_each is not const
    const Body* body;
    std::array<bool, KernelOperands::kMax> on_device;
    std::shared_ptr<at::TensorIterator> owned_iter;
    std::shared_ptr<Body> owned_body;
    IterKernel(at::TensorIteratorBase* i, const Body* b,
               const std::array<bool, KernelOperands::kMax>& d)
        : iter(i), body(b), on_device(d) {}
    IterKernel(const IterKernel& other)
        : on_device(other.on_device),
          owned_iter(ownedCopy(*other.iter)),
          owned_body(std::make_shared<Body>(*other.body)) {
      iter = owned_iter.get();
      body = owned_body.get();
    }
    IterKernel& operator=(const IterKernel&) = delete;
    void operator()(ptrdiff_t offset) const {
      KernelOperands operands;
      for (int i = 0; i < KernelOperands::kMax; ++i) {
        operands.offset[i] = on_device[i] ? offset : 0;
      }
      (*body)(*iter, operands);
    }
  };
  launchRecorded(buffers,
                 IterKernel(const_cast<at::TensorIteratorBase*>(&iter), &body,
                            on_device));
}

} // namespace ember
// ember-book: end recorded_launch
