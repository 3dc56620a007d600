// torch.accelerator.Graph on ember: capture and replay, over the driver's
// graphs (emStreamBeginCapture, emGraphLaunch), and the memory pool a
// graph's buffers come from.
#include <c10/util/Exception.h>

#include "driver/ember_driver.h"
#include "runtime/EmberCheck.h"
#include "runtime/EmberGenerator.h"

// ember-book: begin graph_pool
#include <ATen/core/GraphImplInterface.h> // GraphImplInterface, MempoolId_t

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>

namespace ember {
namespace {

// While a graph captures on (device, stream), the blocks allocated on that
// stream come from the graph's pool: the device cache files them under a
// key of their own, a negative "stream" id that no driver stream has. Only
// a capture into the same pool asks for that key, so no other tensor is
// ever handed memory a replay writes to.
struct PoolRoute {
  bool active = false;
  emStream_t stream = 0;
  emStream_t key = 0;
};
std::mutex routesMutex;
std::array<PoolRoute, 16> routes;
// How many routes are active: every allocation asks allocationStream, and
// without a capture it answers without taking the lock.
std::atomic<int> activeRoutes{0};
std::atomic<uint64_t> nextPool{1};

emStream_t poolKey(const at::MempoolId_t& pool) {
  return -static_cast<emStream_t>(pool.first);
}

void route(int device, emStream_t stream, emStream_t key) {
  const std::lock_guard<std::mutex> lock(routesMutex);
  PoolRoute& r = routes.at(device);
  activeRoutes += (key != 0 ? 1 : 0) - (r.active ? 1 : 0);
  r = PoolRoute{key != 0, stream, key};
}

} // namespace

// The stream key the allocator files a new block under (allocator).
emStream_t allocationStream(int device, emStream_t stream) {
  if (activeRoutes.load() == 0) {
    return stream; // no graph is capturing
  }
  const std::lock_guard<std::mutex> lock(routesMutex);
  const PoolRoute& r = routes.at(device);
  return r.active && r.stream == stream ? r.key : stream;
}

} // namespace ember
// ember-book: end graph_pool

// ember-book: begin graph_impl
#include "runtime/EmberHooks.h" // PlugGraphImpl

#include <fstream>
#include <string>

namespace ember {

std::string takeCompiledBodyError(); // EmberCompiledLaunch.cpp

class EmberGraph final : public at::GraphImplInterface {
 public:
  explicit EmberGraph(const at::GraphImplArgs& /*args*/) {}
  ~EmberGraph() override {
    if (capturing_) {
      route(device_, 0, 0);
      (void)endRandomCapture(device_, stream_);
      emGraph_t dropped = 0;
      (void)emStreamEndCapture(device_, stream_, &dropped); // no throw here
      if (dropped != 0) (void)emGraphDestroy(dropped);
    }
    if (graph_ != 0) (void)emGraphDestroy(graph_);
  }

  // On the current device's current stream, as CUDA's. torch.accelerator.
  // Graph's `with` block picks no stream: it synchronizes, empties the caches
  // and captures on the stream that is current (`with side, graph:`).
  // capture_mode: CUDA's modes, for ember's one potentially unsafe call (a
  // device synchronize: ember_driver.h, emStreamBeginCaptureWithMode).
  void capture_begin(at::MempoolId_t pool,
                     at::GraphCaptureMode capture_mode) override {
    TORCH_CHECK(!capturing_ && graph_ == 0, "ember: this graph holds a "
                "capture already; reset() it before capturing again");
    EMBER_CHECK(emGetDevice(&device_));
    EMBER_CHECK(emGetStream(device_, &stream_));
    pool_ = pool == at::MempoolId_t{0, 0}
        ? at::MempoolId_t{nextPool.fetch_add(1), 0}
        : pool;
    route(device_, stream_, poolKey(pool_));
    const emStreamCaptureMode mode =
        capture_mode == at::GraphCaptureMode::ThreadLocal
            ? emStreamCaptureModeThreadLocal
        : capture_mode == at::GraphCaptureMode::Relaxed
            ? emStreamCaptureModeRelaxed
            : emStreamCaptureModeGlobal; // Default is Global, as CUDA's
    const emError_t began =
        emStreamBeginCaptureWithMode(device_, stream_, mode);
    if (began != emSuccess) {
      route(device_, 0, 0);
      EMBER_CHECK(began);
    }
    random_ = beginRandomCapture(device_, stream_);
    capturing_ = true;
  }

  void capture_end() override {
    TORCH_CHECK(capturing_, "ember: capture_end() without capture_begin()");
    capturing_ = false;
    route(device_, 0, 0);
    randomCount_ = endRandomCapture(device_, stream_);
    const emError_t ended = emStreamEndCapture(device_, stream_, &graph_);
    TORCH_CHECK(ended != emErrorStreamCapture, "ember: the graph capture "
                "failed: operation not permitted when stream is capturing: ",
                emGetErrorDetail(ended), ". Ember records its kernels (eager "
                "and compiled, random ones included), device copies and copies "
                "from pinned host memory; a synchronize, a copy to pageable "
                "host memory and a host read of a device value cannot be "
                "captured.");
    EMBER_CHECK(ended);
  }

  void instantiate() override {
    TORCH_CHECK(graph_ != 0, "ember: the graph holds no capture");
  }

  // On the graph's device's current stream, in order with its other work.
  // Its random calls first take their counter values from the generator.
  void replay() override {
    TORCH_CHECK(graph_ != 0, "ember: replay() of a graph that holds no "
                "capture (capture into it first, or it was reset)");
    if (random_ != nullptr) {
      replayRandom(device_, *random_, randomCount_);
    }
    emStream_t current = 0;
    EMBER_CHECK(emGetStream(device_, &current));
    EMBER_CHECK(emGraphLaunch(graph_, device_, current));
    const std::string thrown = takeCompiledBodyError();
    TORCH_CHECK(thrown.empty(), "ember: a kernel of the graph failed: ", thrown);
  }

  // Drops the graph: its memory is no longer kept for it.
  void reset() override {
    TORCH_CHECK(!capturing_, "ember: reset() during a capture; end it first");
    if (graph_ != 0) {
      EMBER_CHECK(emGraphDestroy(graph_));
      graph_ = 0;
    }
    pool_ = {0, 0};
    random_ = nullptr;
    randomCount_ = 0;
  }

  at::MempoolId_t pool() const override {
    return pool_;
  }

  void enable_debug_mode() override {
    debug_ = true;
  }

  // A line per graph: its device and how many kernels it replays.
  void debug_dump(const std::string& path) override {
    TORCH_CHECK(debug_, "ember: call enable_debug_mode() before debug_dump()");
    size_t kernels = 0;
    if (graph_ != 0) EMBER_CHECK(emGraphGetNodeCount(graph_, &kernels));
    std::ofstream(path) << "ember graph on ember:" << device_ << ": "
                        << kernels << " kernels\n";
  }

 private:
  int device_ = 0;
  emStream_t stream_ = 0;
  emGraph_t graph_ = 0;
  at::MempoolId_t pool_{0, 0};
  bool capturing_ = false;
  bool debug_ = false;
  // The counter values its random calls take per replay, and where they
  // start (written by each replay, read by the calls).
  std::shared_ptr<GraphRandomBase> random_;
  uint64_t randomCount_ = 0;
};

std::unique_ptr<at::GraphImplInterface> createGraph(
    const at::GraphImplArgs& args) {
  return std::make_unique<EmberGraph>(args);
}

// PyTorch finds the implementation in its graph registry, by the device
// type's name. A registry key cannot be registered twice in a process, and
// the book rebuilds the backend: the stable library registers "EMBER" once,
// and each build plugs its own graphs in (runtime/EmberHooks.h).
static PlugGraphImpl plug_graph_impl(&createGraph);

} // namespace ember
// ember-book: end graph_impl
