// Links (emLinkOpen): one named shared-memory object mapped twice in this
// process and once in a forked child, where what a kernel writes through one
// mapping, the others read; the errors that name what is wrong; and the name
// gone from /dev/shm after emLinkUnlink.

#include "selftest.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace {

struct Write {
  int* at;   // device address
  int value;
};

// A kernel: *at = value, through the kernel's view of device memory.
void write_int(void* p) {
  const Write* w = static_cast<const Write*>(p);
  ptrdiff_t offset = 0;
  emGetKernelOffset(&offset);
  *reinterpret_cast<int*>(reinterpret_cast<char*>(w->at) + offset) = w->value;
}

emError_t launch_write(int* at, int value) {
  Write w{at, value};
  void* const buffers[] = {at};
  return emLaunchKernel(write_int, &w, buffers, 1);
}

int read_int(const int* at) {
  int value = -1;
  CHECK_OK(emMemcpy(&value, at, sizeof(int), emMemcpyDeviceToHost));
  return value;
}

} // namespace

void test_links() {
  char name[64];
  std::snprintf(name, sizeof(name), "/ember-selftest-link-%d",
                static_cast<int>(getpid()));
  char path[80];
  std::snprintf(path, sizeof(path), "/dev/shm%s", name);
  const size_t size = 10000; // not a whole number of pages
  size_t page = 0;
  CHECK_OK(emMemGetGranularity(&page));
  const emMemStats before = stats_of(0);
  size_t free_before = 0;
  size_t total = 0;
  CHECK_OK(emMemGetInfo(0, &free_before, &total));

  int* a = nullptr;
  int* b = nullptr;
  void* x = nullptr;
  CHECK_OK(emLinkOpen(name, size, 1, reinterpret_cast<void**>(&a)));
  CHECK(a != nullptr && reinterpret_cast<uintptr_t>(a) % page == 0);
  CHECK(access(path, F_OK) == 0);
  // Errors, with the detail.
  CHECK_EM(emLinkOpen(name, size, 1, &x), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "exists already"));
  CHECK_EM(emLinkOpen(name, 8192, 0, &x), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "has 10000 bytes, not 8192"));
  CHECK_EM(emLinkOpen("/ember-selftest-no-such-link", size, 0, &x),
           emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "no link named"));
  CHECK(x == nullptr);
  CHECK_EM(emLinkOpen(name, 0, 0, &x), emErrorInvalidValue);
  CHECK_EM(emLinkOpen(nullptr, size, 0, &x), emErrorInvalidValue);
  CHECK_EM(emLinkOpen(name, size, 0, nullptr), emErrorInvalidValue);

  // Opened a second time: another address, the same memory.
  CHECK_OK(emLinkOpen(name, size, 0, reinterpret_cast<void**>(&b)));
  CHECK(b != nullptr && b != a);
  const int last = static_cast<int>(size / sizeof(int)) - 1;
  CHECK(read_int(b) == 0 && read_int(b + last) == 0); // zero-filled
  CHECK_OK(launch_write(a, 11));
  CHECK_OK(launch_write(a + last, 12));
  CHECK(read_int(b) == 11 && read_int(b + last) == 12);
  int host = 13;
  CHECK_OK(emMemcpy(b + 1, &host, sizeof(int), emMemcpyHostToDevice));
  CHECK(read_int(a + 1) == 13);
  CHECK_OK(emMemcpy(a + 2, b + 1, sizeof(int), emMemcpyDeviceToDevice));
  CHECK(read_int(b + 2) == 13);
  // Device memory in all else: the device owns it, the host cannot touch it.
  int device = -1;
  CHECK_OK(emPointerGetDevice(a + 5, &device));
  CHECK(device == 0);
  CHECK(host_read_signal(a) == SIGSEGV);
  CHECK_EM(emFree(a), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "emLinkClose"));
  // Not in the device's stats or capacity.
  const emMemStats during = stats_of(0);
  CHECK(during.bytes_in_use == before.bytes_in_use);
  CHECK(during.live_allocations == before.live_allocations);
  size_t free_during = 0;
  CHECK_OK(emMemGetInfo(0, &free_during, &total));
  CHECK(free_during == free_before);

  // Another process opens it by name and writes through a kernel.
  const pid_t pid = fork();
  if (pid == 0) {
    int* c = nullptr;
    bool ok = emLinkOpen(name, size, 0, reinterpret_cast<void**>(&c)) ==
        emSuccess;
    ok = ok && launch_write(c + 100, 42) == emSuccess &&
        emLinkClose(c) == emSuccess;
    // The inherited mapping is shared too (fork keeps links shared).
    ok = ok && launch_write(a + 101, 43) == emSuccess;
    _exit(ok ? 0 : 1);
  }
  int status = -1;
  waitpid(pid, &status, 0);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  CHECK(read_int(b + 100) == 42);
  CHECK(read_int(b + 101) == 43);

  // Unlinked: the name is gone, the mappings still work.
  CHECK_OK(emLinkUnlink(name));
  CHECK(access(path, F_OK) != 0);
  CHECK_EM(emLinkUnlink(name), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "no link named"));
  CHECK_EM(emLinkOpen(name, size, 0, &x), emErrorInvalidValue);
  CHECK_OK(launch_write(b + 3, 14));
  CHECK(read_int(a + 3) == 14);

  // Close: not while queued work uses it.
  emStream_t s = 0;
  CHECK_OK(emStreamCreate(0, &s));
  int back = 0;
  CHECK_OK(emSleepAsync(20000, 0, s));
  CHECK_OK(emMemcpyAsync(&back, a, sizeof(int), emMemcpyDeviceToHost, 0, s));
  CHECK_EM(emLinkClose(a), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "still used"));
  CHECK_OK(emStreamSynchronize(0, s));
  CHECK(back == 11);
  CHECK_OK(emLinkClose(a));
  CHECK_OK(emLinkClose(b));
  CHECK_EM(emLinkClose(a), emErrorInvalidValue);
  CHECK(detail_has(emErrorInvalidValue, "not a link"));
  CHECK_EM(emPointerGetDevice(a, &device), emErrorInvalidValue);

  // On device 1, a link is device 1's memory.
  CHECK_OK(emSetDevice(1));
  CHECK_OK(emLinkOpen(name, size, 1, reinterpret_cast<void**>(&a)));
  CHECK_OK(emPointerGetDevice(a, &device));
  CHECK(device == 1);
  CHECK_OK(emLinkUnlink(name));
  CHECK_OK(emLinkClose(a));
  CHECK_OK(emSetDevice(0));
}
