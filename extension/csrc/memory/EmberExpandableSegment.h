// An expandable segment (PYTORCH_ALLOC_CONF=expandable_segments:True): one
// range of device address space, reserved once, that a segment of the
// device cache grows into. Instead of a new driver allocation for each
// larger request, pages are mapped at its end; when the cache empties,
// free pages at its end are unmapped. Without it, a sequence of ever larger
// requests leaves one cached segment per size behind.
#pragma once

// ember-book: begin expandable_segment_api
#include <cstddef>

namespace ember {

class ExpandableSegment {
 public:
  // Pages are mapped (and unmapped) in chunks of this size, one driver
  // mapping each, so that any whole number of chunks at the end can go.
  static constexpr size_t kChunk = size_t{2} << 20;

  // Reserves `size` bytes of `device`'s address space (nothing mapped yet).
  // valid() is false if the driver has no address space left.
  ExpandableSegment(int device, size_t size);
  ~ExpandableSegment();
  ExpandableSegment(const ExpandableSegment&) = delete;
  ExpandableSegment& operator=(const ExpandableSegment&) = delete;

  bool valid() const {
    return base_ != nullptr;
  }
  int device() const {
    return device_;
  }
  char* base() const {
    return base_;
  }
  size_t mapped() const {
    return mapped_;
  }
  char* end() const {
    return base_ + mapped_;
  }

  // Maps `bytes` (whole chunks) more at the end. False, with nothing
  // mapped, if the device has not that much memory free or the range is
  // full.
  bool grow(size_t bytes);
  // Unmaps the last `bytes` (whole chunks), after waiting for the device:
  // queued work may still use them. False, with nothing unmapped, if a
  // graph still uses them (the driver keeps a graph's memory).
  bool shrink(size_t bytes);

  // The cache's last block in the range (opaque here), or nullptr.
  void* last_block = nullptr;

 private:
  int device_;
  size_t reserved_;
  char* base_ = nullptr;
  size_t mapped_ = 0;
};

} // namespace ember
// ember-book: end expandable_segment_api
