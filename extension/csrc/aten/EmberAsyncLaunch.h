// The asynchronous form of ember's one launch primitive: the body runs on a
// stream's worker thread, after the stream's earlier work, and the host goes
// on at once. What collectives run as (csrc/distributed).
#pragma once

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"

// ember-book: begin async_launch
#include <c10/util/ArrayRef.h>
#include <c10/util/Exception.h>

#include <exception>
#include <memory>
#include <string>
#include <utility>

namespace ember {

// body(offset) on (device, stream)'s worker, in stream order; returns once it
// is queued. The rules of ember::launch hold, and two more:
// - the body owns what it captures (it outlives this call): capture tensors
//   and state by value, never the caller's locals by reference;
// - an exception in the body cannot reach the caller, who has gone on: the
//   driver records it as the stream's asynchronous failure (emKernelFail),
//   which every later synchronize of the stream, or of an event recorded
//   after it, reports, as a real device reports a failed kernel.
template <typename Body>
void launchAsync(int device, emStream_t stream,
                 c10::ArrayRef<const void*> buffers, Body body) {
  struct Call {
    Body body;
    static void run(void* arg) {
      std::unique_ptr<Call> self(static_cast<Call*>(arg));
      try {
        ptrdiff_t offset = 0;
        EMBER_CHECK(emGetKernelOffset(&offset));
        self->body(offset);
      } catch (const c10::Error& e) {
        emKernelFail(e.what_without_backtrace());
      } catch (const std::exception& e) {
        emKernelFail(e.what());
      } catch (...) {
        emKernelFail("unknown exception in an asynchronous kernel");
      }
    }
  };
  auto call = std::make_unique<Call>(Call{std::move(body)});
  EMBER_CHECK(emLaunchKernelAsync(&Call::run, call.get(),
                                  const_cast<void* const*>(buffers.data()),
                                  buffers.size(), device, stream));
  call.release(); // the worker owns it now: Call::run deletes it
}

} // namespace ember
// ember-book: end async_launch
