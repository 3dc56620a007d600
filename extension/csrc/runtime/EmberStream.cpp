// ember's streams as PyTorch sees them: the pool torch.Stream() draws from,
// and Tensor.record_stream for memory used on more than one stream.
#include <ATen/core/Tensor.h>
#include <c10/core/Stream.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <mutex>
#include <unordered_map>
#include <vector>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin stream_pool
namespace ember {

// torch.Stream(device) asks the guard for a new stream every time. A driver
// stream is never destroyed (and runs a worker thread once it has work), so,
// as CUDA does, each device gets a fixed pool, created as it is first needed
// and then handed out in turn: the 5th request reuses the 1st stream.
constexpr size_t kPoolStreamsPerDevice = 4;

c10::Stream streamFromPool(c10::Device device) {
  struct Pool {
    std::vector<emStream_t> ids;
    size_t next = 0;
  };
  // Leaked on purpose: a stream handed out may be used during shutdown.
  static auto* mutex = new std::mutex;
  static auto* pools = new std::unordered_map<c10::DeviceIndex, Pool>;
  std::lock_guard<std::mutex> lock(*mutex);
  Pool& pool = (*pools)[device.index()];
  if (pool.ids.size() < kPoolStreamsPerDevice) {
    emStream_t id = 0;
    EMBER_CHECK(emStreamCreate(device.index(), &id)); // checks the device
    pool.ids.push_back(id);
  }
  const emStream_t id = pool.ids[pool.next++ % pool.ids.size()];
  return c10::Stream(c10::Stream::UNSAFE, device, id);
}

} // namespace ember
// ember-book: end stream_pool

// ember-book: begin record_stream
namespace ember {

// Tensor.record_stream(s): "this tensor's memory is used on stream s". The
// allocator's business, so the kernel hands it to the device guard, which
// is where PyTorch's own callers (the autograd engine) tell it too.
void recordStream(at::Tensor& self, c10::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              "ember: record_stream: a tensor on ", self.device(),
              " can only be recorded on an ember stream, got a stream of ",
              stream.device());
  c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)
      ->recordDataPtrOnStream(self.storage().data_ptr(), stream);
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("record_stream", TORCH_FN(recordStream));
}

} // namespace ember
// ember-book: end record_stream
