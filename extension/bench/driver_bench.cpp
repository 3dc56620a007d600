// What the driver's double mapping buys, measured (run by driver_bench.py).
//
// Before, every copy and launch lifted a PROT_NONE protection off the buffers
// and restored it: an mprotect pair per buffer. Now device memory is mapped
// twice and nothing changes protection at run time. This program measures the
// old cost, the launch cost now, a 1M-float add on the host and as a kernel,
// and copy bandwidth against a host memcpy. Medians of repeated runs.

#include "bench_timing.h"
#include "ember_driver.h"

#include <sys/mman.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

void check(emError_t status, const char* what) {
  if (status != emSuccess) {
    std::fprintf(stderr, "%s failed: %s\n", what, emGetErrorString(status));
    std::exit(1);
  }
}

constexpr size_t kAddElements = size_t{1} << 20;

// c = a + b over float arrays; the same loop on the host and in the kernel.
__attribute__((noinline)) void add_floats(const float* __restrict__ a,
                                          const float* __restrict__ b,
                                          float* __restrict__ c, size_t n) {
  for (size_t i = 0; i < n; ++i) c[i] = a[i] + b[i];
}

struct AddArgs {
  const float* a;
  const float* b;
  float* c;
};

// Where a kernel touches device address p.
template <typename T>
T* at(T* p, ptrdiff_t offset) {
  return reinterpret_cast<T*>(
      reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(offset));
}

void add_kernel(void* raw) {
  const auto* args = static_cast<const AddArgs*>(raw);
  ptrdiff_t offset = 0;
  if (emGetKernelOffset(&offset) != emSuccess) return;
  add_floats(at(args->a, offset), at(args->b, offset), at(args->c, offset),
             kAddElements);
}

void empty_kernel(void*) {}

double gb_per_s(size_t bytes, double us) {
  return static_cast<double>(bytes) / (us * 1e-6) / 1e9;
}

} // namespace

int main() {
  // --- Old design: an mprotect pair on a populated 4 MiB region.
  const size_t region = size_t{4} << 20;
  void* host_region = mmap(nullptr, region, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host_region == MAP_FAILED) return 1;
  std::memset(host_region, 1, region);
  const double mprotect_pair = median_us(
      [&] {
        mprotect(host_region, region, PROT_NONE);
        mprotect(host_region, region, PROT_READ | PROT_WRITE);
      },
      15, 20);
  munmap(host_region, region);

  // --- Launch overhead now: an empty kernel handed 1 or 3 populated buffers.
  std::vector<void*> buffers(3);
  std::vector<float> ones(kAddElements, 1.0f);
  for (void*& p : buffers) {
    check(emMalloc(&p, kAddElements * sizeof(float)), "emMalloc");
    check(emMemcpy(p, ones.data(), kAddElements * sizeof(float),
                   emMemcpyHostToDevice),
          "emMemcpy");
  }
  const double launch_1 = median_us(
      [&] { emLaunchKernel(empty_kernel, nullptr, buffers.data(), 1); }, 15,
      2000);
  const double launch_3 = median_us(
      [&] { emLaunchKernel(empty_kernel, nullptr, buffers.data(), 3); }, 15,
      2000);

  // --- A 1M-float add: on the host, and as an ember kernel.
  std::vector<float> ha(kAddElements, 1.0f), hb(kAddElements, 2.0f),
      hc(kAddElements, 0.0f);
  AddArgs args{static_cast<const float*>(buffers[0]),
               static_cast<const float*>(buffers[1]),
               static_cast<float*>(buffers[2])};
  const auto [host_add, kernel_add] = paired_median_us(
      [&] { add_floats(ha.data(), hb.data(), hc.data(), kAddElements); },
      [&] { emLaunchKernel(add_kernel, &args, buffers.data(), 3); }, 21, 10);
  float check_value = 0.0f;
  check(emMemcpy(&check_value, buffers[2], sizeof(float),
                 emMemcpyDeviceToHost),
        "emMemcpy");
  for (void* p : buffers) check(emFree(p), "emFree");
  if (check_value != 2.0f) {
    std::fprintf(stderr, "the kernel's add is wrong: %g\n", check_value);
    return 1;
  }

  // --- 64 MiB copies (destinations already populated) vs a host memcpy.
  const size_t big = size_t{64} << 20;
  std::vector<char> src(big, 3), dst(big, 0);
  void* device = nullptr;
  check(emMalloc(&device, big), "emMalloc");
  check(emMemcpy(device, src.data(), big, emMemcpyHostToDevice), "emMemcpy");
  const auto host_memcpy = [&] {
    std::memcpy(dst.data(), src.data(), big);
    asm volatile("" : : "r"(dst.data()) : "memory");
  };
  const auto [h2d, host_copy] = paired_median_us(
      [&] { emMemcpy(device, src.data(), big, emMemcpyHostToDevice); },
      host_memcpy, 11, 2);
  const double d2h = median_us(
      [&] { emMemcpy(dst.data(), device, big, emMemcpyDeviceToHost); }, 11, 2);
  check(emFree(device), "emFree");
  // A first copy into a fresh allocation also pays for the page faults.
  void* fresh = nullptr;
  check(emMalloc(&fresh, big), "emMalloc");
  const auto start = std::chrono::steady_clock::now();
  check(emMemcpy(fresh, src.data(), big, emMemcpyHostToDevice), "emMemcpy");
  const double h2d_fresh = std::chrono::duration<double, std::micro>(
                               std::chrono::steady_clock::now() - start)
                               .count();
  check(emFree(fresh), "emFree");
  // The same first touch on the host: a memcpy into fresh anonymous pages.
  void* fresh_host = mmap(nullptr, big, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (fresh_host == MAP_FAILED) return 1;
  const auto host_start = std::chrono::steady_clock::now();
  std::memcpy(fresh_host, src.data(), big);
  asm volatile("" : : "r"(fresh_host) : "memory");
  const double host_fresh = std::chrono::duration<double, std::micro>(
                                std::chrono::steady_clock::now() - host_start)
                                .count();
  munmap(fresh_host, big);

  std::printf("old design: mprotect pair, populated 4 MiB   %8.1f us\n",
              mprotect_pair);
  std::printf("emLaunchKernel, empty kernel, 1 buffer       %8.2f us\n",
              launch_1);
  std::printf("emLaunchKernel, empty kernel, 3 buffers      %8.2f us\n",
              launch_3);
  std::printf("add of 1M float32, host loop                 %8.1f us\n",
              host_add);
  std::printf("add of 1M float32, ember kernel (launch+loop) %7.1f us"
              "  (%.2fx host)\n",
              kernel_add, kernel_add / host_add);
  std::printf("old design: host add + one mprotect pair per buffer (3): "
              "%.1f us (%.2fx host)\n",
              host_add + 3 * mprotect_pair,
              (host_add + 3 * mprotect_pair) / host_add);
  std::printf("64 MiB host memcpy                           %6.2f GB/s\n",
              gb_per_s(big, host_copy));
  std::printf("64 MiB emMemcpy H2D (populated)              %6.2f GB/s"
              "  (%.2fx memcpy time)\n",
              gb_per_s(big, h2d), h2d / host_copy);
  std::printf("64 MiB emMemcpy D2H                          %6.2f GB/s"
              "  (%.2fx memcpy time)\n",
              gb_per_s(big, d2h), d2h / host_copy);
  std::printf("64 MiB emMemcpy H2D, fresh allocation        %6.2f GB/s"
              "  (first touch of the pages)\n",
              gb_per_s(big, h2d_fresh));
  std::printf("64 MiB host memcpy, fresh anonymous pages    %6.2f GB/s\n",
              gb_per_s(big, host_fresh));
  return 0;
}
