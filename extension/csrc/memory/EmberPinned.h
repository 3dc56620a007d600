// Pinned host memory (the device_guard chapter): what the non_blocking copies ask of it.
#pragma once

#include "driver/ember_driver.h"

// ember-book: begin pinned_api
namespace ember {

// Whether `ptr` lies in a pinned block, and a use of that block by a copy
// queued on (device, stream), so the block outlives the copy. Defined with
// the pinned allocator (pinned_blocks, pinned_allocator); a header part,
// because the copy kernels (another file) call them.
bool isPinnedPtr(const void* ptr);
void recordPinnedUse(const void* ptr, int device, emStream_t stream);

} // namespace ember
// ember-book: end pinned_api
