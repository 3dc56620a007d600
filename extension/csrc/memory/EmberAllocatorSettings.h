// The device cache's settings: PYTORCH_ALLOC_CONF, as PyTorch's own parser
// (c10/core/AllocatorConfig.h) reads it, and CUDA's rules that depend on it.
#pragma once

// ember-book: begin allocator_settings_api
#include <cstddef>
#include <cstdint>
#include <limits>

namespace ember {

struct AllocatorSettings {
  // max_split_size_mb, in bytes: a cached block this large is never split,
  // and serves only requests at least this large. Unlimited by default.
  // Not for blocks of expandable segments: they split freely (their
  // segment does not fragment into segments of every size).
  size_t max_split_size = std::numeric_limits<size_t>::max();
  // max_non_split_rounding_mb, in bytes: how much larger than an oversize
  // request a cached block may be and still serve it whole.
  size_t max_non_split_rounding = size_t{20} << 20;
  // garbage_collection_threshold: the fraction of the device's capacity
  // above which cached free segments are given back before the cache
  // reserves more. 0: never.
  double garbage_collection_threshold = 0;
  // expandable_segments: large blocks of one stream come from one segment
  // that grows in place (EmberExpandableSegment.h).
  bool expandable_segments = false;

  bool isOversize(size_t size) const {
    return size >= max_split_size;
  }

  // CUDA's rule: a request below max_split_size never takes an oversize
  // block (splitting it would fragment it); an oversize request takes a
  // block at most max_non_split_rounding larger, whole.
  bool cachedBlockServes(size_t block_size, size_t request) const {
    if (!isOversize(request)) {
      return !isOversize(block_size);
    }
    return block_size - request < max_non_split_rounding;
  }
};

// The settings of PYTORCH_ALLOC_CONF (or the deprecated
// PYTORCH_CUDA_ALLOC_CONF), read when the device cache is first used.
// A value PyTorch's parser rejects, or a key no allocator knows, raises
// ValueError naming the variable, its value and PyTorch's reason.
AllocatorSettings readAllocatorSettings();

} // namespace ember
// ember-book: end allocator_settings_api
