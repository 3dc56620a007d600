// The device guard: how PyTorch asks "which ember device and stream are
// current?", switches them for the duration of an operation, and works with
// the driver's streams and events.
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "runtime/EmberCheck.h"
#include "driver/ember_driver.h"

// ember-book: begin device_guard
#include <c10/core/CachingDeviceAllocator.h> // c10::DeviceAllocator

namespace ember {

// The pool of streams that torch.Stream() draws from (stream_pool).
c10::Stream streamFromPool(c10::Device device);

// c10 keeps an event as an opaque void*, null until the event is first
// recorded. The driver names events by an id > 0, which fits in it.
inline emSyncEvent_t eventId(void* event) {
  return static_cast<emSyncEvent_t>(reinterpret_cast<intptr_t>(event));
}

// PyTorch looks this up with c10::impl::getDeviceGuardImpl(PrivateUse1)
// whenever it reads or switches the current ember device or stream: every
// c10::DeviceGuard and StreamGuard, torch.Stream, torch.Event, the autograd
// engine. The current device and the current stream live in the driver,
// per host thread, as in CUDA; the guard keeps no state.
struct EmberGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType static_type = c10::DeviceType::PrivateUse1;

  c10::DeviceType type() const override {
    return static_type;
  }

  c10::Device getDevice() const override {
    int device = 0;
    EMBER_CHECK(emGetDevice(&device));
    return c10::Device(static_type, static_cast<c10::DeviceIndex>(device));
  }

  void setDevice(c10::Device device) const override {
    TORCH_CHECK(device.type() == static_type,
                "ember device guard: expected an ember device, got ", device);
    // The driver decides which indices exist and says what is wrong.
    EMBER_CHECK(emSetDevice(device.index()));
  }

  // Guards are constructed around many calls: skip the driver call when the
  // device is already current.
  c10::Device exchangeDevice(c10::Device device) const override {
    const c10::Device previous = getDevice();
    if (previous != device) {
      setDevice(device);
    }
    return previous;
  }

  // Called from guard destructors to restore the previous device: must not
  // throw, and the device was valid when the guard saved it.
  void uncheckedSetDevice(c10::Device device) const noexcept override {
    (void)emSetDevice(device.index());
  }

  // deviceCount() is called while PyTorch probes backends; it must not throw.
  c10::DeviceIndex deviceCount() const noexcept override {
    int count = 0;
    return emGetDeviceCount(&count) == emSuccess
        ? static_cast<c10::DeviceIndex>(count)
        : 0;
  }

  // Streams. The driver names a stream by (device, id), id 0 being the
  // device's default stream: exactly a c10::Stream's device and StreamId,
  // so a stream needs no table on this side. A device without an index
  // (torch.Stream("privateuseone")) means the current one.
  c10::Stream getStream(c10::Device device) const override {
    device = device.has_index() ? device : getDevice();
    emStream_t id = 0;
    EMBER_CHECK(emGetStream(device.index(), &id));
    return c10::Stream(c10::Stream::UNSAFE, device, id);
  }

  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT,
                       device.has_index() ? device : getDevice());
  }

  // torch.Stream(device) asks for a new stream every time, and the driver's
  // streams live as long as the process: hand out pool streams, as CUDA
  // does. ember has one priority, so both calls draw from the same pool.
  c10::Stream getStreamFromGlobalPool(c10::Device device,
                                      bool /*isHighPriority*/) const override {
    return streamFromPool(device.has_index() ? device : getDevice());
  }

  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return streamFromPool(device.has_index() ? device : getDevice());
  }

  // Makes `stream` current on its device and returns the stream it replaces
  // there. The current device stays as it is (PyTorch's contract).
  c10::Stream exchangeStream(c10::Stream stream) const override {
    TORCH_CHECK(stream.device_type() == static_type,
                "ember device guard: expected an ember stream, got ", stream);
    const c10::Stream previous = getStream(stream.device());
    EMBER_CHECK(emSetStream(stream.device_index(), stream.id()));
    return previous;
  }

  // torch.Stream.native_handle: the driver's own name for the stream.
  void* getStreamNativeHandle(const c10::Stream stream) const override {
    return reinterpret_cast<void*>(static_cast<intptr_t>(stream.id()));
  }

  bool queryStream(const c10::Stream& stream) const override {
    int idle = 0;
    EMBER_CHECK(emStreamQuery(stream.device_index(), stream.id(), &idle));
    return idle != 0;
  }

  void synchronizeStream(const c10::Stream& stream) const override {
    EMBER_CHECK(emStreamSynchronize(stream.device_index(), stream.id()));
  }

  // torch.accelerator.synchronize() and torch.<device>.synchronize() end
  // here: every stream of the device.
  void synchronizeDevice(c10::DeviceIndex device_index) const override {
    EMBER_CHECK(emDeviceSynchronize(device_index));
  }

  // Events. c10::Event creates nothing until its first record, and passes
  // the device it was first recorded on (-1 before): the driver event is
  // created then, on the stream's device, with timing only if asked for
  // (torch.Event(enable_timing=True) is EventFlag::BACKEND_DEFAULT).
  void record(void** event, const c10::Stream& stream,
              const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(),
                "ember: an event of device ",
                c10::Device(static_type, device_index),
                " cannot be recorded on a stream of device ", stream.device(),
                ": an event belongs to the device it was first recorded on");
    if (*event == nullptr) {
      emSyncEvent_t id = 0;
      EMBER_CHECK(emSyncEventCreate(
          stream.device_index(), &id,
          flag == c10::EventFlag::BACKEND_DEFAULT ? emSyncEventDefault
                                                  : emSyncEventDisableTiming));
      *event = reinterpret_cast<void*>(static_cast<intptr_t>(id));
    }
    EMBER_CHECK(emSyncEventRecord(eventId(*event), stream.device_index(),
                                  stream.id()));
  }

  // Later work on `stream` waits for the event (the host does not). An
  // event never recorded has nothing to wait for (PyTorch's rule; c10::Event
  // does not even call us then).
  void block(void* event, const c10::Stream& stream) const override {
    if (event == nullptr) {
      return;
    }
    EMBER_CHECK(
        emStreamWaitSyncEvent(stream.device_index(), stream.id(), eventId(event)));
  }

  bool queryEvent(void* event) const override {
    if (event == nullptr) {
      return true;
    }
    int done = 0;
    EMBER_CHECK(emSyncEventQuery(eventId(event), &done));
    return done != 0;
  }

  void synchronizeEvent(void* event) const override {
    if (event != nullptr) {
      EMBER_CHECK(emSyncEventSynchronize(eventId(event)));
    }
  }

  // Milliseconds between two completed timing events of one device: c10
  // checks the flags and the records, the driver the devices.
  double elapsedTime(void* start, void* end,
                     const c10::DeviceIndex /*device_index*/) const override {
    float ms = 0;
    EMBER_CHECK(emSyncEventElapsedTime(&ms, eventId(start), eventId(end)));
    return ms;
  }

  // Runs in c10::Event's destructor: must not throw. Work already queued
  // that refers to the event still happens.
  void destroyEvent(void* event,
                    const c10::DeviceIndex /*device_index*/) const noexcept override {
    if (event != nullptr) {
      (void)emSyncEventDestroy(eventId(event));
    }
  }

  // Tensor.record_stream(s) ends here: memory allocated on one stream is
  // used on `stream`. A caching allocator must not hand it out again before
  // the work queued there has run, so it is told (a c10::DeviceAllocator
  // has recordStream; the end of this chapter builds one). Chapter 1's
  // allocator caches nothing, and the driver itself holds freed memory back
  // until the queued work that uses it has run: then only the stream is
  // checked.
  void recordDataPtrOnStream(const c10::DataPtr& data_ptr,
                             const c10::Stream& stream) const override {
    (void)queryStream(stream);
    auto* allocator = c10::GetAllocator(static_type);
    if (auto* caching = dynamic_cast<c10::DeviceAllocator*>(allocator)) {
      caching->recordStream(data_ptr, stream);
    }
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, EmberGuardImpl);

} // namespace ember
// ember-book: end device_guard
