// ember in torch.profiler: the sessions of a Kineto activity profiler for the
// PrivateUse1 device.
//
// Kineto drives it: at the first profile it makes one EmberProfiler (from
// the factory the stable library registers, runtime/EmberHooks.cpp), and for
// each trace asks it for a session (configure, which calls this build's
// newSession through a slot), starts and stops the session, then has it log what it saw
// (processTrace). The session installs the driver's activity callback
// (ember_driver.h) between start and stop: the driver times every kernel and
// copy on the thread that does it and reports it, with the correlation id of
// the operator that issued it. processTrace turns each record into Kineto's
// activities: the device side (a kernel or a memcpy, on one track per ember
// stream) linked to its ATen operator, and, if asked for, the host side (the
// driver call, a PRIVATEUSE1_RUNTIME activity) joined to it by a flow arrow.

#include "driver/ember_driver.h"

// ember-book: begin profiler_records
// Kineto's public headers declare the profiler interfaces only under
// USE_KINETO, which PyTorch's own build defines and an extension's does not.
// GenericTraceActivity formats metadata with fmt inline; header-only fmt
// keeps that from needing a fmt symbol that libtorch does not export.
#define USE_KINETO
#define FMT_HEADER_ONLY

#include <kineto/libkineto.h> // CpuTraceBuffer, complete
#include <kineto/output_base.h> // ActivityLogger, complete
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ember {
namespace {

using libkineto::ActivityType;

// One activity as the driver reported it. The name is copied: the driver's
// pointer is valid during the callback only.
struct Record {
  emActivity activity;
  std::string name;
};

// Where the driver's activity callback writes. The driver has one activity
// callback and Kineto one trace at a time, so there is one buffer, and the
// running session owns it between start and stop. Records come from any
// thread (a stream's worker for asynchronous copies).
class ActivityBuffer {
 public:
  static ActivityBuffer& get() {
    // Never destroyed: a worker may report while the process exits.
    static ActivityBuffer* const instance = new ActivityBuffer();
    return *instance;
  }

  void start() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      records_.clear();
      recording_ = true;
    }
    emSetActivityCallback(&ActivityBuffer::onActivity, this);
  }

  std::vector<Record> stop() {
    emSetActivityCallback(nullptr, nullptr);
    std::lock_guard<std::mutex> lock(mutex_);
    recording_ = false; // a report already under way is dropped
    return std::exchange(records_, {});
  }

 private:
  static void onActivity(const emActivity* activity, void* user) {
    auto* self = static_cast<ActivityBuffer*>(user);
    std::lock_guard<std::mutex> lock(self->mutex_);
    if (!self->recording_) {
      return;
    }
    self->records_.push_back(
        {*activity, activity->name != nullptr ? activity->name : ""});
  }

  std::mutex mutex_;
  std::vector<Record> records_;
  bool recording_ = false;
};

// An eager kernel's name, from the operator that launched it: aten::mm
// launches "ember_mm". (Compiled kernels come named by their launcher.)
std::string kernelName(const Record& record,
                       const libkineto::ITraceActivity* op) {
  if (!record.name.empty()) {
    return record.name;
  }
  if (op == nullptr) {
    return "ember_kernel";
  }
  std::string name = op->name();
  if (name.rfind("aten::", 0) == 0) {
    name.erase(0, 6);
  }
  for (size_t at = name.find("::"); at != std::string::npos;
       at = name.find("::", at)) {
    name.replace(at, 2, "_");
  }
  return "ember_" + name;
}

const char* copyName(emMemcpyKind kind) {
  switch (kind) {
    case emMemcpyHostToDevice:
      return "Memcpy HtoD (Host -> ember)";
    case emMemcpyDeviceToHost:
      return "Memcpy DtoH (ember -> Host)";
    case emMemcpyDeviceToDevice:
      break;
  }
  return "Memcpy DtoD (ember -> ember)";
}

const char* runtimeName(const emActivity& activity) {
  switch (activity.kind) {
    case emActivityKernel:
      return activity.graph != 0 ? "emGraphLaunch" : "emLaunchKernel";
    case emActivitySleep:
      return "emSleepAsync";
    case emActivitySyncEventRecord:
      return "emSyncEventRecord";
    case emActivityMemcpy:
      break;
  }
  return activity.async ? "emMemcpyAsync" : "emMemcpy";
}

// How Kineto shows each kind of record, and under which name. A sleep keeps
// its stream busy like a kernel (torch.cuda._sleep is one); an event record
// is a point on its stream, a synchronization activity as CUDA's are.
std::pair<ActivityType, std::string> shownAs(
    const Record& record,
    const libkineto::ITraceActivity* op) {
  switch (record.activity.kind) {
    case emActivityKernel:
      return {ActivityType::CONCURRENT_KERNEL, kernelName(record, op)};
    case emActivitySleep:
      return {ActivityType::CONCURRENT_KERNEL, "ember_sleep"};
    case emActivitySyncEventRecord:
      return {ActivityType::CUDA_SYNC, "Event Record (ember)"};
    case emActivityMemcpy:
      break;
  }
  return {ActivityType::GPU_MEMCPY, copyName(record.activity.memcpy_kind)};
}

} // namespace
} // namespace ember
// ember-book: end profiler_records

// ember-book: begin profiler_session
namespace ember {
namespace {

class EmberSession : public libkineto::IActivityProfilerSession {
 public:
  explicit EmberSession(const std::set<ActivityType>& types)
      : kernels_(types.count(ActivityType::CONCURRENT_KERNEL) > 0),
        copies_(types.count(ActivityType::GPU_MEMCPY) > 0),
        runtime_(types.count(ActivityType::PRIVATEUSE1_RUNTIME) > 0) {}

  // Kineto configures this session even when only CPU activity was asked
  // for: then it records nothing, and the driver times nothing.
  void start() override {
    if (kernels_ || copies_) {
      ActivityBuffer::get().start();
      recording_ = true;
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (recording_) {
      records_ = ActivityBuffer::get().stop();
      recording_ = false;
    }
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override {
    return {};
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(logger, nullptr, 0, 0);
  }

  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback getLinkedActivity,
                    int64_t startTime, int64_t endTime) override;

  // Kineto asks a session for one device's row name: ember 0's. The other
  // devices that did work are named in processTrace.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override {
    return std::make_unique<libkineto::DeviceInfo>(deviceInfo(0));
  }

  // One track per (device, stream) that did work: Kineto shows a resource
  // as a row under its device.
  std::vector<libkineto::ResourceInfo> getResourceInfos() override {
    std::vector<libkineto::ResourceInfo> infos;
    for (const auto& [key, unused] : streams_) {
      const auto [device, stream] = key;
      infos.push_back(libkineto::ResourceInfo{
          stream, stream, device, "ember stream " + std::to_string(stream)});
    }
    return infos;
  }

  // The logger keeps pointers to the activities processTrace logged, and
  // Kineto calls this after processTrace to hand their owner to the trace:
  // they live as long as the trace does, not as this session.
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override {
    return std::move(buffer_);
  }

  // Called on the operator's thread around each ATen operator.
  void pushCorrelationId(uint64_t id) override {
    emActivityPushCorrelationId(id);
  }

  void popCorrelationId() override {
    emActivityPopCorrelationId(nullptr);
  }

 private:
  // A device's row in the trace: Kineto puts device d's activities under
  // process id d.
  static libkineto::DeviceInfo deviceInfo(int64_t device) {
    return libkineto::DeviceInfo{
        device, device, "ember", "ember " + std::to_string(device)};
  }

  libkineto::GenericTraceActivity& add(ActivityType type, std::string name) {
    buffer_->emplace_activity(buffer_->span, type, std::move(name));
    return *buffer_->activities.back();
  }

  const bool kernels_;
  const bool copies_;
  const bool runtime_;
  bool recording_ = false;
  std::vector<Record> records_;
  std::map<std::pair<int64_t, int64_t>, bool> streams_;
  // The activities of processTrace, each on the heap, and their span.
  std::unique_ptr<libkineto::CpuTraceBuffer> buffer_;
};

} // namespace
} // namespace ember
// ember-book: end profiler_session

// ember-book: begin profiler_trace
namespace ember {
namespace {

void EmberSession::processTrace(
    libkineto::ActivityLogger& logger,
    libkineto::getLinkedActivityCallback getLinkedActivity,
    int64_t startTime,
    int64_t endTime) {
  buffer_ = std::make_unique<libkineto::CpuTraceBuffer>();
  buffer_->span = libkineto::TraceSpan(startTime, endTime, "ember");
  buffer_->gpuOpCount = 0;
  const int32_t pid = libkineto::processId();
  uint32_t flow = 0;
  // A graph replay is one host call for all its kernels: one runtime
  // activity, with an arrow to the first.
  std::pair<int64_t, uint64_t> lastReplay{0, 0};
  for (const Record& record : records_) {
    const emActivity& a = record.activity;
    const bool copy = a.kind == emActivityMemcpy;
    if (copy ? !copies_ : !kernels_) {
      continue;
    }
    // Kineto's correlation ids are 32-bit, the ids pushed 64-bit.
    const auto correlation = static_cast<int32_t>(a.correlation_id);
    const libkineto::ITraceActivity* op =
        getLinkedActivity && correlation != 0 ? getLinkedActivity(correlation)
                                              : nullptr;
    ++flow;
    auto [type, name] = shownAs(record, op);
    auto& device = add(type, std::move(name));
    device.startTime = static_cast<int64_t>(a.start_ns);
    device.endTime = static_cast<int64_t>(a.end_ns);
    device.id = correlation;
    device.device = a.device;
    device.resource = static_cast<int32_t>(a.stream);
    device.threadId = static_cast<int32_t>(a.stream);
    device.linked = op;
    if (copy) {
      device.addMetadata("bytes", a.bytes);
    }
    if (a.kind == emActivitySyncEventRecord) {
      device.addMetadata("event", a.sync_event);
    }
    streams_[{a.device, a.stream}] = true;
    const bool replayed = a.graph != 0 &&
        lastReplay == std::make_pair(a.graph, a.issue_start_ns);
    lastReplay = {a.graph, a.issue_start_ns};
    if (runtime_ && !replayed) {
      // The driver call on the host, and an arrow from it to its work.
      auto& host = add(ActivityType::PRIVATEUSE1_RUNTIME, runtimeName(a));
      host.startTime = static_cast<int64_t>(a.issue_start_ns);
      host.endTime = static_cast<int64_t>(a.issue_end_ns);
      host.id = correlation;
      host.device = pid;
      host.resource = static_cast<int32_t>(a.issue_thread);
      host.threadId = static_cast<int32_t>(a.issue_thread);
      host.linked = op;
      host.flow.id = flow;
      host.flow.type = libkineto::kLinkAsyncCpuGpu;
      host.flow.start = 1;
      device.flow.id = flow;
      device.flow.type = libkineto::kLinkAsyncCpuGpu;
      device.flow.start = 0;
      logger.handleGenericActivity(host);
    }
    logger.handleGenericActivity(device);
  }
  std::set<int64_t> devices;
  for (const auto& [key, unused] : streams_) {
    devices.insert(key.first);
  }
  devices.erase(0); // getDeviceInfo's
  for (const int64_t d : devices) {
    logger.handleDeviceInfo(deviceInfo(d), startTime);
  }
  records_.clear();
}

} // namespace
} // namespace ember
// ember-book: end profiler_trace

// ember-book: begin profiler_plug
#include "runtime/EmberHooks.h" // PlugProfilerSession

namespace ember {
namespace {

// A session for each profiled run, made by this build: Kineto keeps the
// stable library's profiler for the process, which asks this slot for it.
std::unique_ptr<libkineto::IActivityProfilerSession> newSession(
    const std::set<ActivityType>& types,
    const libkineto::Config& /*config*/) {
  return std::make_unique<EmberSession>(types);
}

// Plugged while this library is loaded: a rebuilt backend's sessions replace
// these, and the first plug registers the profiler with PyTorch.
const PlugProfilerSession plug_profiler_session(&newSession);

} // namespace
} // namespace ember
// ember-book: end profiler_plug
