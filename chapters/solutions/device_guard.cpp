// Exercise solutions of the device_guard chapter, shown in the chapter's solution cells.
// Not part of the torch_ember package; the chapter's builds compile them
// when an exercise is built by name. See book/run/sync.py.
#include <torch/library.h>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin exercise_sleep_op
namespace ember_exercise {

// Busy device work on the current stream of the current device, queued:
// returns at once.
void sleep(int64_t microseconds) {
  TORCH_CHECK(microseconds >= 0, "ember::sleep: expected a duration >= 0, got ",
              microseconds, " microseconds");
  int device = 0;
  EMBER_CHECK(emGetDevice(&device));
  emStream_t stream = 0;
  EMBER_CHECK(emGetStream(device, &stream));
  EMBER_CHECK(emSleepAsync(static_cast<uint64_t>(microseconds), device, stream));
}

} // namespace ember_exercise

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("sleep(int microseconds) -> ()");
}

// No tensor argument, so no backend key to dispatch on.
TORCH_LIBRARY_IMPL(ember, CompositeExplicitAutograd, m) {
  m.impl("sleep", TORCH_FN(ember_exercise::sleep));
}
// ember-book: end exercise_sleep_op
