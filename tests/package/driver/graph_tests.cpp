// Graphs: a capturing stream records by-value launches without running them;
// a replay runs them again, on the same buffers; what cannot be captured
// fails and invalidates the capture; a graph keeps its memory until destroyed.

#include "selftest.h"

#include <cstring>
#include <vector>

namespace {

struct AddOne {
  float* data; // device address
  size_t n;
};

// data[i] += 1, through the launch's offset.
void add_one(void* raw) {
  const auto* args = static_cast<const AddOne*>(raw);
  ptrdiff_t offset = 0;
  if (emGetKernelOffset(&offset) != emSuccess) return;
  auto* data = reinterpret_cast<float*>(reinterpret_cast<char*>(args->data) + offset);
  for (size_t i = 0; i < args->n; ++i) data[i] += 1.0f;
}

void by_reference(void*) {}

// emLaunchKernelRecordable's argument: clones and destroys are counted.
int clones = 0;
int destroys = 0;
void* clone_add_one(const void* arg) {
  ++clones;
  return new AddOne(*static_cast<const AddOne*>(arg));
}
void destroy_add_one(void* copy) {
  ++destroys;
  delete static_cast<AddOne*>(copy);
}

float first_of(float* device_data) {
  float value = -1;
  emMemcpy(&value, device_data, sizeof value, emMemcpyDeviceToHost);
  return value;
}

} // namespace

void test_graphs() {
  CHECK_OK(emSetDevice(0));
  emStream_t stream = 0;
  CHECK_OK(emStreamCreate(0, &stream));
  CHECK_OK(emSetStream(0, stream));
  void* raw = nullptr;
  CHECK_OK(emMalloc(&raw, 4 * sizeof(float)));
  auto* data = static_cast<float*>(raw);
  const float zeros[4] = {0, 0, 0, 0};
  CHECK_OK(emMemcpy(data, zeros, sizeof zeros, emMemcpyHostToDevice));

  // Capture two launches: nothing runs. The argument is copied at capture,
  // so changing the caller's copy afterwards changes nothing.
  int capturing = 0;
  CHECK_OK(emStreamBeginCapture(0, stream));
  CHECK_OK(emStreamIsCapturing(0, stream, &capturing));
  CHECK(capturing == 1);
  AddOne args{data, 4};
  void* buffers[] = {data};
  CHECK_OK(emLaunchKernelByValue(&add_one, &args, sizeof args, buffers, 1));
  args.n = 0;
  CHECK_OK(emLaunchKernelByValue(&add_one, &args, sizeof args, buffers, 1));
  emGraph_t graph = 0;
  CHECK_OK(emStreamEndCapture(0, stream, &graph));
  CHECK(graph > 0);
  size_t nodes = 0;
  CHECK_OK(emGraphGetNodeCount(graph, &nodes));
  CHECK(nodes == 2);
  CHECK(first_of(data) == 0.0f); // captured, not run

  // Each replay adds 1 once (the second node was captured with n = 0).
  CHECK_OK(emGraphLaunch(graph, 0, stream));
  CHECK_OK(emGraphLaunch(graph, 0, stream));
  CHECK(first_of(data) == 2.0f);
  CHECK_EM(emGraphLaunch(graph, 1, 0), emErrorInvalidValue); // another device

  // The graph keeps its memory: freed, the range is not reused until the
  // graph goes, and a replay still writes there.
  const size_t live = stats_of(0).live_allocations;
  CHECK_OK(emFree(data));
  CHECK(stats_of(0).live_allocations == live - 1);
  CHECK_OK(emGraphLaunch(graph, 0, stream));
  CHECK_OK(emGraphDestroy(graph));
  CHECK_EM(emGraphDestroy(graph), emErrorInvalidValue);
  CHECK_EM(emGraphLaunch(graph, 0, stream), emErrorInvalidValue);

  // What cannot be captured fails, names itself, and invalidates the capture.
  CHECK_OK(emMalloc(&raw, 64));
  void* more[] = {raw};
  CHECK_OK(emStreamBeginCapture(0, stream));
  CHECK_EM(emStreamBeginCapture(0, stream), emErrorStreamCapture);
  CHECK_EM(emLaunchKernel(&by_reference, nullptr, more, 1), emErrorStreamCapture);
  CHECK(std::strstr(emGetErrorDetail(emErrorStreamCapture), "emLaunchKernel") != nullptr);
  char host[64] = {};
  CHECK_EM(emMemcpy(raw, host, 64, emMemcpyHostToDevice), emErrorStreamCapture);
  CHECK_EM(emStreamSynchronize(0, stream), emErrorStreamCapture);
  CHECK_EM(emDeviceSynchronize(0), emErrorStreamCapture);
  CHECK_EM(emSleepAsync(10, 0, stream), emErrorStreamCapture);
  CHECK_EM(emStreamEndCapture(0, stream, &graph), emErrorStreamCapture);
  CHECK(std::strstr(emGetErrorDetail(emErrorStreamCapture), "invalidated by emLaunchKernel") != nullptr);
  CHECK_OK(emStreamIsCapturing(0, stream, &capturing));
  CHECK(capturing == 0);
  CHECK_EM(emStreamEndCapture(0, stream, &graph), emErrorStreamCapture); // not capturing

  // Outside a capture, a by-value launch runs at once on a copy.
  AddOne now{static_cast<float*>(raw), 1};
  const float zero = 0;
  CHECK_OK(emMemcpy(raw, &zero, sizeof zero, emMemcpyHostToDevice));
  CHECK_OK(emLaunchKernelByValue(&add_one, &now, sizeof now, more, 1));
  CHECK(first_of(static_cast<float*>(raw)) == 1.0f);

  // A recordable launch runs in place outside a capture: never cloned.
  CHECK_OK(emLaunchKernelRecordable(&add_one, &now, &clone_add_one,
                                    &destroy_add_one, more, 1));
  CHECK(first_of(static_cast<float*>(raw)) == 2.0f && clones == 0);
  CHECK_EM(emLaunchKernelRecordable(&add_one, &now, nullptr, &destroy_add_one,
                                    more, 1),
           emErrorInvalidValue);
  // While capturing it is cloned once and recorded; the graph owns the clone
  // (the caller's argument may go), and destroys it with itself.
  CHECK_OK(emStreamBeginCapture(0, stream));
  {
    AddOne local{static_cast<float*>(raw), 1};
    CHECK_OK(emLaunchKernelRecordable(&add_one, &local, &clone_add_one,
                                      &destroy_add_one, more, 1));
    local.n = 0; // the clone was taken at capture
  }
  CHECK_OK(emStreamEndCapture(0, stream, &graph));
  CHECK(clones == 1 && destroys == 0);
  CHECK(first_of(static_cast<float*>(raw)) == 2.0f); // recorded, not run
  CHECK_OK(emGraphLaunch(graph, 0, stream));
  CHECK_OK(emGraphLaunch(graph, 0, stream));
  CHECK(first_of(static_cast<float*>(raw)) == 4.0f);
  CHECK_OK(emGraphDestroy(graph));
  CHECK(destroys == 1);
  // An invalidated capture destroys what it had recorded.
  CHECK_OK(emStreamBeginCapture(0, stream));
  CHECK_OK(emLaunchKernelRecordable(&add_one, &now, &clone_add_one,
                                    &destroy_add_one, more, 1));
  CHECK_EM(emDeviceSynchronize(0), emErrorStreamCapture);
  CHECK_EM(emStreamEndCapture(0, stream, &graph), emErrorStreamCapture);
  CHECK(clones == 2 && destroys == 2);
  CHECK_OK(emFree(raw));
  CHECK_OK(emSetStream(0, 0));
}
