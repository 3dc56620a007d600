// Links: device memory that processes on one machine share, as peer access
// or NVLink joins real devices (what eccl's collectives move data through).
//
// A link is a named POSIX shared-memory object (/dev/shm/<name>). Each
// process maps it into the current device's reservable address space, in
// both views, as emMemMap maps pages of the device's own file (vmm.cpp), and
// registers it as an Allocation marked `link`: kernels, copies and launches
// find it like any other device memory, so a kernel of one process writes
// what a kernel of another reads. The object is not the device's file, so a
// link takes nothing from the device's capacity, counts in no stats, and its
// release gives back only the address space (never a range of the file).
//
// After fork() the child keeps the parent's mapping (MAP_SHARED: fork.cpp
// leaves it alone), so parent and child share the link as two processes that
// opened it by name do.

#include "internal.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace ember::driver::detail {
namespace {

size_t page_size() {
  static const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return page;
}

// Closes the object's descriptor on every path: once mapped, the mapping
// keeps the object alive.
struct Descriptor {
  int fd = -1;
  ~Descriptor() {
    if (fd >= 0) close(fd);
  }
};

} // namespace
} // namespace ember::driver::detail

using namespace ember::driver::detail;

extern "C" {

emError_t emLinkOpen(const char* name, size_t size, int create, void** ptr) {
  const EntryPoint entry;
  if (ptr == nullptr) return emErrorInvalidValue;
  *ptr = nullptr;
  if (name == nullptr || size == 0) {
    return fail(emErrorInvalidValue,
                "emLinkOpen needs a name and a size of at least one byte");
  }
  State& s = state();
  if (s.region.base == nullptr || size > s.region.va_size) {
    return fail(emErrorMemoryAllocation,
                "a link of %zu bytes does not fit in a device's address "
                "space",
                size);
  }
  const int device = current_device;
  Descriptor object;
  const int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
  object.fd = shm_open(name, flags, 0600);
  if (object.fd < 0) {
    const int err = errno;
    if (create && err == EEXIST) {
      return fail(emErrorInvalidValue,
                  "link \"%s\" exists already (emLinkOpen with create = 0 "
                  "opens it)",
                  name);
    }
    if (!create && err == ENOENT) {
      return fail(emErrorInvalidValue,
                  "no link named \"%s\" (emLinkOpen with create = 1 makes "
                  "it)",
                  name);
    }
    return fail(emErrorInvalidValue, "cannot open link \"%s\": %s", name,
                std::strerror(err));
  }
  emError_t status = emSuccess;
  if (create) {
    // A new object is empty; growing it reads as zeros.
    if (ftruncate(object.fd, static_cast<off_t>(size)) != 0) {
      status = fail(emErrorMemoryAllocation,
                    "cannot size link \"%s\" to %zu bytes: %s", name, size,
                    std::strerror(errno));
    }
  } else {
    // Both sides must agree on the size: a kernel of the larger one would
    // touch pages past the end of the object (SIGBUS).
    const off_t actual = lseek(object.fd, 0, SEEK_END);
    if (actual != static_cast<off_t>(size)) {
      status = fail(emErrorInvalidValue,
                    "link \"%s\" has %lld bytes, not %zu", name,
                    static_cast<long long>(actual), size);
    }
  }
  const size_t page = page_size();
  const size_t mapped_size = (size + page - 1) / page * page;
  if (status == emSuccess) {
    status = translate_exceptions([&] {
      std::lock_guard<std::mutex> lock(s.mutex);
      size_t offset = 0;
      if (!s.va_free_lists[device].take(mapped_size, &offset)) {
        return fail(emErrorMemoryAllocation,
                    "device %d has no %zu bytes of address space left for a "
                    "link",
                    device, mapped_size);
      }
      char* base = s.region.va_base(device) + offset;
      // Undoes the mapping and the address space on a failure below.
      auto release = [&] {
        (void)unmap_piece(s.region, base, mapped_size);
        s.va_free_lists[device].give_back(offset, mapped_size);
      };
      if (!map_piece(s.region, base, mapped_size, object.fd, 0)) {
        const int err = errno;
        release();
        return fail(emErrorMemoryAllocation, "cannot map link \"%s\": %s",
                    name, std::strerror(err));
      }
      try {
        auto link = std::make_shared<Allocation>(device, size, mapped_size,
                                                 0, base);
        link->link = true; // its destructor gives nothing back
        s.allocations.emplace(addr(base), std::move(link));
      } catch (const std::bad_alloc&) {
        release();
        throw;
      }
      *ptr = base;
      return emSuccess;
    });
  }
  // A link this call made but could not open leaves no name behind.
  if (status != emSuccess && create) (void)shm_unlink(name);
  return status;
}

emError_t emLinkUnlink(const char* name) {
  const EntryPoint entry;
  if (name == nullptr) return emErrorInvalidValue;
  if (shm_unlink(name) != 0) {
    const int err = errno;
    if (err == ENOENT) {
      return fail(emErrorInvalidValue, "no link named \"%s\"", name);
    }
    return fail(emErrorInvalidValue, "cannot remove link \"%s\": %s", name,
                std::strerror(err));
  }
  return emSuccess;
}

emError_t emLinkClose(void* ptr) {
  const EntryPoint entry;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.allocations.find(addr(ptr));
  if (ptr == nullptr || it == s.allocations.end() || !it->second->link) {
    return fail(emErrorInvalidValue,
                "%p is not a link's address (emLinkOpen gives one)", ptr);
  }
  const Allocation& link = *it->second;
  if (it->second.use_count() > 1) {
    return fail(emErrorInvalidValue,
                "the link at %p is still used by queued work or a graph "
                "(synchronize first)",
                ptr);
  }
  (void)unmap_piece(s.region, link.base, link.mapped_size);
  s.va_free_lists[link.device].give_back(
      static_cast<size_t>(link.base - s.region.va_base(link.device)),
      link.mapped_size);
  s.allocations.erase(it); // `link` dangles from here
  return emSuccess;
}

} // extern "C"
