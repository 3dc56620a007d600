// Address reservations: reserving commits nothing, mapped pages count and
// work for copies and kernels (also across separate mappings, and when the
// device's free pages are fragmented), unmapped ones are refused again, and a
// forked child gets its own copy of mapped pages.

#include "selftest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

namespace {

constexpr size_t kMiB = size_t{1} << 20;

size_t free_bytes(int device) {
  size_t free = 0, total = 0;
  emMemGetInfo(device, &free, &total);
  return free;
}

struct AddArgs {
  unsigned char* a; // device address
  size_t n;
};

void add_one_kernel(void* raw) {
  auto* args = static_cast<AddArgs*>(raw);
  ptrdiff_t offset = 0;
  if (emGetKernelOffset(&offset) != emSuccess) return;
  unsigned char* a = args->a + offset;
  for (size_t i = 0; i < args->n; ++i) ++a[i];
}

// Writes i % 251 at byte i of [p, p + n) and reads it back.
bool round_trip(void* p, size_t n) {
  std::vector<unsigned char> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = static_cast<unsigned char>(i % 251);
  if (emMemcpy(p, in.data(), n, emMemcpyHostToDevice) != emSuccess ||
      emMemcpy(out.data(), p, n, emMemcpyDeviceToHost) != emSuccess) {
    return false;
  }
  return in == out;
}

} // namespace

void test_vmm() {
  size_t page = 0;
  CHECK_OK(emMemGetGranularity(&page));
  CHECK(page > 0 && 2 * kMiB % page == 0);
  CHECK_EM(emMemGetGranularity(nullptr), emErrorInvalidValue);

  // Reserving commits nothing.
  const emMemStats before = stats_of(0);
  const size_t free_before = free_bytes(0);
  void* base = nullptr;
  CHECK_OK(emMemAddressReserve(&base, 8 * kMiB));
  CHECK(base != nullptr);
  CHECK(free_bytes(0) == free_before);
  CHECK(stats_of(0).bytes_in_use == before.bytes_in_use);
  char* b = static_cast<char*>(base);
  unsigned char byte = 1;
  CHECK_EM(emMemcpy(b, &byte, 1, emMemcpyHostToDevice), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "lies in a reservation but is not"));
  void* const unmapped[] = {b};
  AddArgs args{reinterpret_cast<unsigned char*>(b), 1};
  CHECK_EM(emLaunchKernel(add_one_kernel, &args, unmapped, 1),
           emErrorInvalidValue);
  CHECK_EM(emMemAddressReserve(&base, page + 1), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "granularity"));

  // Mapping commits pages: counted, usable by copies and kernels.
  CHECK_OK(emMemMap(b, 2 * kMiB));
  CHECK(free_bytes(0) == free_before - 2 * kMiB);
  CHECK(stats_of(0).bytes_in_use == before.bytes_in_use + 2 * kMiB);
  CHECK(round_trip(b, 2 * kMiB));
  int device = -1;
  CHECK_OK(emPointerGetDevice(b + 100, &device));
  CHECK(device == 0);
  args = AddArgs{reinterpret_cast<unsigned char*>(b), 16};
  void* const mapped[] = {b};
  CHECK_OK(emLaunchKernel(add_one_kernel, &args, mapped, 1));
  unsigned char got[16] = {};
  CHECK_OK(emMemcpy(got, b, 16, emMemcpyDeviceToHost));
  CHECK(got[0] == 1 && got[15] == 16);

  // A second mapping right after the first: one copy spans both.
  CHECK_OK(emMemMap(b + 2 * kMiB, 2 * kMiB));
  CHECK(round_trip(b + kMiB, 2 * kMiB));
  CHECK(round_trip(b, 4 * kMiB));
  void* d2d = nullptr;
  CHECK_OK(emMalloc(&d2d, 4 * kMiB));
  CHECK_OK(emMemcpy(d2d, b, 4 * kMiB, emMemcpyDeviceToDevice));
  CHECK(round_trip(d2d, 4 * kMiB));
  CHECK_OK(emFree(d2d));
  // ... but not past the mapped end.
  CHECK_EM(emMemcpy(b + 4 * kMiB - 1, got, 2, emMemcpyHostToDevice),
           emErrorInvalidValue);

  // What the calls refuse.
  CHECK_EM(emMemMap(b + kMiB, 2 * kMiB), emErrorInvalidValue); // mapped
  CHECK(detail_has(emErrorInvalidValue, "mapped already"));
  CHECK_EM(emMemMap(b + 6 * kMiB, 4 * kMiB), emErrorInvalidValue); // past end
  CHECK(detail_has(emErrorInvalidValue, "not inside one reservation"));
  CHECK_EM(emMemMap(b + 4 * kMiB + 1, page), emErrorInvalidValue);
  CHECK_EM(emFree(b), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "emMemUnmap"));
  CHECK_EM(emMemUnmap(b, kMiB), emErrorInvalidValue); // cuts a mapping
  CHECK_EM(emMemUnmap(b + 4 * kMiB, 2 * kMiB), emErrorInvalidValue);
  CHECK_EM(emMemAddressFree(b), emErrorInvalidValue); // pages mapped
  CHECK(detail_has(emErrorInvalidValue, "still has pages mapped"));
  CHECK_EM(emMemAddressFree(b + page), emErrorInvalidValue);

  // A forked child sees the mapped pages, and writes its own copy of them.
  CHECK_OK(emMemcpy(b, "parent", 7, emMemcpyHostToDevice));
  const pid_t pid = fork();
  if (pid == 0) {
    char seen[7] = {};
    const bool ok = emMemcpy(seen, b, 7, emMemcpyDeviceToHost) == emSuccess &&
        std::memcmp(seen, "parent", 7) == 0 &&
        emMemcpy(b, "child!", 7, emMemcpyHostToDevice) == emSuccess;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char seen[7] = {};
  CHECK_OK(emMemcpy(seen, b, 7, emMemcpyDeviceToHost));
  CHECK(std::memcmp(seen, "parent", 7) == 0);

  // Unmapping the tail returns its pages; its addresses are refused again,
  // and mapped anew they read as zeros.
  CHECK_OK(emMemUnmap(b + 2 * kMiB, 2 * kMiB));
  CHECK(free_bytes(0) == free_before - 2 * kMiB);
  CHECK(stats_of(0).bytes_in_use == before.bytes_in_use + 2 * kMiB);
  CHECK_EM(emMemcpy(b + 2 * kMiB, &byte, 1, emMemcpyHostToDevice),
           emErrorInvalidValue);
  CHECK(host_read_signal(b + 2 * kMiB) == SIGSEGV);
  CHECK_OK(emMemMap(b + 2 * kMiB, 2 * kMiB));
  std::vector<unsigned char> zeros(2 * kMiB, 7);
  CHECK_OK(emMemcpy(zeros.data(), b + 2 * kMiB, zeros.size(),
                    emMemcpyDeviceToHost));
  CHECK(std::all_of(zeros.begin(), zeros.end(),
                    [](unsigned char c) { return c == 0; }));
  // A graph keeps the pages it uses: they cannot be unmapped under it.
  emStream_t stream = 0;
  emGraph_t graph = 0;
  CHECK_OK(emStreamCreate(0, &stream));
  CHECK_OK(emSetStream(0, stream));
  CHECK_OK(emStreamBeginCapture(0, stream));
  args = AddArgs{reinterpret_cast<unsigned char*>(b + 2 * kMiB), 4};
  void* const tail[] = {b + 2 * kMiB};
  CHECK_OK(emLaunchKernelByValue(add_one_kernel, &args, sizeof args, tail, 1));
  CHECK_OK(emStreamEndCapture(0, stream, &graph));
  CHECK_OK(emSetStream(0, 0));
  CHECK_EM(emMemUnmap(b + 2 * kMiB, 2 * kMiB), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "used by queued work or a graph"));
  CHECK_OK(emGraphDestroy(graph));
  CHECK_OK(emMemUnmap(b, 4 * kMiB)); // two mappings in one call
  CHECK(free_bytes(0) == free_before);
  CHECK(stats_of(0).bytes_in_use == before.bytes_in_use);
  CHECK_OK(emMemAddressFree(b));
  CHECK_EM(emMemAddressFree(b), emErrorInvalidValue);

  // Fragmented free pages: a mapping takes them in pieces.
  void* parts[4] = {};
  CHECK_OK(emMalloc(&parts[0], kMiB));
  CHECK_OK(emMalloc(&parts[1], kMiB));
  CHECK_OK(emMalloc(&parts[2], kMiB));
  CHECK_OK(emMalloc(&parts[3], free_bytes(0))); // the rest of the device
  CHECK(free_bytes(0) == 0);
  CHECK_OK(emFree(parts[0]));
  CHECK_OK(emFree(parts[2])); // two holes of 1 MiB
  CHECK_OK(emMemAddressReserve(&base, 4 * kMiB));
  b = static_cast<char*>(base);
  CHECK_EM(emMemMap(b, 4 * kMiB), emErrorMemoryAllocation);
  CHECK(detail_has(emErrorMemoryAllocation, "no 4194304 bytes free"));
  CHECK_OK(emMemMap(b, 2 * kMiB));
  CHECK(free_bytes(0) == 0);
  CHECK(round_trip(b, 2 * kMiB));
  CHECK_EM(emMemUnmap(b, kMiB), emErrorInvalidValue); // half of one mapping
  CHECK_EM(emMemUnmap(b + kMiB, kMiB), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "cuts through a mapping"));
  CHECK_OK(emMemUnmap(b, 2 * kMiB));
  CHECK(free_bytes(0) == 2 * kMiB);
  CHECK_OK(emMemAddressFree(b));
  CHECK_OK(emFree(parts[1]));
  CHECK_OK(emFree(parts[3]));
  CHECK(free_bytes(0) == free_before);

  // Address space is finite too: 8 capacities per device.
  size_t free = 0, total = 0;
  CHECK_OK(emMemGetInfo(0, &free, &total));
  CHECK_EM(emMemAddressReserve(&base, 9 * total), emErrorMemoryAllocation);
  CHECK(detail_has(emErrorMemoryAllocation, "address space"));
  CHECK(base == nullptr);
}
