// Exercise solutions of the allocator chapter (shown by its %%cpp exercise_* cells).
// Not part of the torch_ember package: the chapter's builds compile them.
#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>

// ember-book: begin exercise_capped_allocator
namespace ember {

constexpr size_t kMaxAllocationBytes = size_t{1} << 20;

struct CappedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    TORCH_CHECK_WITH(OutOfMemoryError, nbytes <= kMaxAllocationBytes,
                     "ember: refusing to allocate ", nbytes,
                     " bytes: allocations are capped at ", kMaxAllocationBytes,
                     " bytes");
    return ember_allocator.allocate(nbytes);
  }
  c10::DeleterFnPtr raw_deleter() const override {
    return ember_allocator.raw_deleter();
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    ember_allocator.copy_data(dest, src, count);
  }
};

static CappedAllocator capped_allocator;
static c10::AllocatorRegisterer<c10::DeviceType::PrivateUse1> capped_registration(
    &capped_allocator);

} // namespace ember
// ember-book: end exercise_capped_allocator
