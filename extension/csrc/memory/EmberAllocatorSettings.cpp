// PYTORCH_ALLOC_CONF for ember's device cache. PyTorch parses the variable
// itself, once per process, into AcceleratorAllocatorConfig (shared by every
// accelerator); a backend reads the parsed values and checks the keys meant
// for another backend's parser (CUDA's does the same in
// CUDAAllocatorConfig::parseArgs). Ember has no keys of its own, so it
// registers no parser hook.
#include "memory/EmberAllocatorSettings.h"

// ember-book: begin allocator_settings
#include <c10/core/AllocatorConfig.h>
#include <c10/util/Exception.h>
#include <c10/util/env.h>

#include <exception>
#include <string>

namespace ember {
namespace {

using c10::CachingAllocator::AcceleratorAllocatorConfig;
using c10::CachingAllocator::ConfigTokenizer;

// Which variable PyTorch read (it prefers PYTORCH_ALLOC_CONF), for messages.
std::string settingsSource() {
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}) {
    if (auto value = c10::utils::get_env(name)) {
      return std::string(name) + "=\"" + *value + "\"";
    }
  }
  return "the allocator settings";
}

// Every key must be one some allocator knows: a typo must not be ignored.
void checkKeys(const std::string& settings) {
  const auto& keys = AcceleratorAllocatorConfig::getKeys();
  const ConfigTokenizer tokens(settings);
  for (size_t i = 0; i < tokens.size(); ++i) {
    TORCH_CHECK_VALUE(keys.count(tokens[i]) != 0, "Unrecognized key '",
                      tokens[i], "' in ember allocator config.");
    i = tokens.skipKey(i);
    if (i + 1 < tokens.size()) {
      TORCH_CHECK_VALUE(tokens.checkToken(++i, ","), "Expected ',' after ",
                        "the value at token ", i, " but got '", tokens[i],
                        "'");
    }
  }
}

} // namespace

AllocatorSettings readAllocatorSettings() {
  AllocatorSettings s;
  try {
    // The first call parses the environment: it throws if PyTorch's parser
    // rejects a value, and again on the next call.
    (void)AcceleratorAllocatorConfig::instance();
    checkKeys(AcceleratorAllocatorConfig::last_allocator_settings());
  } catch (const c10::Error& e) {
    TORCH_CHECK_VALUE(false, "ember: cannot use ", settingsSource(), ": ",
                      e.what_without_backtrace());
  } catch (const std::exception& e) { // std::stoull's invalid_argument
    TORCH_CHECK_VALUE(false, "ember: cannot use ", settingsSource(),
                      ": a value is not a number (", e.what(), ")");
  }
  s.max_split_size = AcceleratorAllocatorConfig::max_split_size();
  s.max_non_split_rounding =
      AcceleratorAllocatorConfig::max_non_split_rounding_size();
  s.garbage_collection_threshold =
      AcceleratorAllocatorConfig::garbage_collection_threshold();
  s.expandable_segments = AcceleratorAllocatorConfig::use_expandable_segments();
  return s;
}

} // namespace ember
// ember-book: end allocator_settings
