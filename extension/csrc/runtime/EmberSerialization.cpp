// Backend metadata: a per-tensor property ember keeps on the TensorImpl (its
// storage format), how torch.save / torch.load carry it, and what clone()
// does with it.
//
// A real accelerator often stores a tensor's elements in a layout of its own
// (tiles for a matrix unit, channel blocks for a convolution unit) and must
// remember, per tensor, which one. PyTorch gives such a backend one slot on
// every TensorImpl, a c10::BackendMeta, and one way to save it: a
// string -> bool map that torch::jit's registry asks the backend to fill and
// to read back. The registry's forwarders live in the stable library
// (runtime/EmberHooks.cpp); this file plugs ember's functions into them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/clone_native.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/library.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

// ember-book: begin tensor_format
#include "runtime/EmberHooks.h" // the slots: PlugBackendMeta

namespace ember {

// How a tensor's elements are arranged in ember memory. Ember only keeps the
// tag (its kernels read plain strided memory whatever it says); a real
// backend would also convert the bytes when the tag changes.
enum class Format : uint8_t {
  Plain = 0, // as sizes and strides say: the only format PyTorch knows
  Tiled = 1, // 8x8 tiles, what a matrix unit reads
  Blocked = 2, // channels in blocks of 4, what a convolution unit reads
};

constexpr std::array<std::string_view, 3> kFormatNames = {"plain", "tiled",
                                                          "blocked"};

// The tag lives on the TensorImpl, in the one slot PyTorch reserves for a
// backend (TensorImpl::set_backend_meta).
struct EmberTensorMeta final : c10::BackendMeta {
  explicit EmberTensorMeta(Format format) : format(format) {}

  // Called when PyTorch copies a TensorImpl's metadata (detach(), `.data`,
  // shallow copies). The default returns the same object, so the copy and the
  // original would share one tag; each gets its own.
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const override {
    return c10::make_intrusive<EmberTensorMeta>(format);
  }

  Format format;
};

Format tensorFormat(const at::Tensor& tensor) {
  const auto* meta = dynamic_cast<const EmberTensorMeta*>(
      tensor.unsafeGetTensorImpl()->get_backend_meta());
  return meta == nullptr ? Format::Plain : meta->format;
}

void setTensorFormat(const at::Tensor& tensor, Format format) {
  TORCH_CHECK(tensor.device().type() == c10::DeviceType::PrivateUse1,
              "ember: a storage format is a property of ember tensors; got a "
              "tensor on ", tensor.device());
  // Plain is the absence of a tag: a tensor that never had one is plain.
  tensor.unsafeGetTensorImpl()->set_backend_meta(
      format == Format::Plain ? nullptr
                              : c10::make_intrusive<EmberTensorMeta>(format));
}

} // namespace ember
// ember-book: end tensor_format

// ember-book: begin format_serialization
namespace ember {

// The serialized form: one flag per format, "ember_format_<name>": true. A
// plain tensor writes nothing, so its checkpoint is what PyTorch alone writes.
constexpr std::string_view kFormatPrefix = "ember_format_";

// torch.save (through torch._utils.get_tensor_metadata): add the tag.
void serializeFormat(const at::Tensor& tensor,
                     std::unordered_map<std::string, bool>& metadata) {
  const Format format = tensorFormat(tensor);
  if (format != Format::Plain) {
    const auto name = kFormatNames[static_cast<size_t>(format)];
    metadata[std::string(kFormatPrefix).append(name)] = true;
  }
}

// torch.load (through torch._utils.set_tensor_metadata): apply the flags. A
// map without format flags leaves the tensor as it is; a flag this build does
// not know (a checkpoint from a newer ember) or two formats are errors, not a
// silently wrong layout.
void deserializeFormat(const at::Tensor& tensor,
                       std::unordered_map<std::string, bool>& metadata) {
  std::optional<Format> chosen;
  bool any_flag = false;
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kFormatPrefix, 0) != 0) {
      continue; // PyTorch's own flags ("conj", "neg") and others
    }
    any_flag = true;
    const std::string_view name = std::string_view(key).substr(
        kFormatPrefix.size());
    std::optional<Format> format;
    for (size_t i = 0; i < kFormatNames.size(); ++i) {
      if (kFormatNames[i] == name) {
        format = static_cast<Format>(i);
      }
    }
    TORCH_CHECK(format.has_value(), "ember: unknown storage format flag '",
                key, "' in the metadata of a tensor on ", tensor.device(),
                " (known formats: plain, tiled, blocked)");
    if (!value) {
      continue; // "not this format"
    }
    TORCH_CHECK(!chosen.has_value() || *chosen == *format,
                "ember: the metadata of a tensor on ", tensor.device(),
                " names two storage formats, ",
                kFormatNames[static_cast<size_t>(*chosen)], " and ", name);
    chosen = format;
  }
  if (any_flag) {
    setTensorFormat(tensor, chosen.value_or(Format::Plain));
  }
}

// The stable library registered forwarders with torch::jit once per process;
// they call these while this build is loaded.
static PlugBackendMeta plug_backend_meta(&serializeFormat, &deserializeFormat);

} // namespace ember
// ember-book: end format_serialization

// ember-book: begin format_clone
#include <ATen/ops/clone_native.h>

namespace ember {

// clone() builds a new TensorImpl (empty_like, then copy_), which starts
// plain. Ember's decision: a clone is the same tensor in new memory, so it
// keeps the format. (Views keep ATen's behaviour: a new TensorImpl, plain.)
at::Tensor cloneKeepingFormat(const at::Tensor& self,
                              std::optional<c10::MemoryFormat> memory_format) {
  at::Tensor result = at::native::clone(self, memory_format);
  setTensorFormat(result, tensorFormat(self));
  return result;
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("clone", TORCH_FN(cloneKeepingFormat));
}

} // namespace ember
// ember-book: end format_clone
