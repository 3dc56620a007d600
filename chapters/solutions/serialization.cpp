// The serialization chapter's exercise solutions: C++ the book shows and builds on request
// (book.build("exercise_NAME")), not compiled into the package.
#include <ATen/core/Tensor.h>

#include <string>
#include <unordered_map>

#include "runtime/EmberHooks.h"

// ember-book: begin exercise_legacy_flag
namespace ember {
// Chapter 12's functions (EmberSerialization.cpp).
void serializeFormat(const at::Tensor& tensor,
                     std::unordered_map<std::string, bool>& metadata);
void deserializeFormat(const at::Tensor& tensor,
                       std::unordered_map<std::string, bool>& metadata);
} // namespace ember

namespace ember_exercise {

// An older ember wrote "ember_tiled": true for a tiled tensor. Translate it
// into today's flag, then read the map as this build does.
void deserializeWithLegacyFlag(const at::Tensor& tensor,
                               std::unordered_map<std::string, bool>& metadata) {
  const auto old = metadata.find("ember_tiled");
  if (old != metadata.end()) {
    const bool tiled = old->second;
    metadata.erase(old);
    metadata.emplace("ember_format_tiled", tiled); // a current flag wins
  }
  ember::deserializeFormat(tensor, metadata);
}

// Constructed after the chapter's plug (later in the same unit): last wins.
static ember::PlugBackendMeta plug_legacy_flag(&ember::serializeFormat,
                                               &deserializeWithLegacyFlag);

} // namespace ember_exercise
// ember-book: end exercise_legacy_flag
