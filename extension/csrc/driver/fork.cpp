// fork(): what the child of a process using the driver gets. The child gets a
// copy of host memory but, since the device files are MAP_SHARED, the
// parent's device memory itself: the child's copies, kernels and frees would
// land in the parent's tensors. So the child copies the device files' data
// into files of its own and maps those in their place, as if device memory
// were copied on fork like the rest of the process. Every driver lock is
// taken around fork() so that the child's copies of them are consistent;
// before them, the streams are drained (scheduler_before_fork, stream.cpp),
// so that the copy holds the results of all work queued before the fork.
// Links (link.cpp) are the exception, on purpose: their memory is meant to be
// shared between processes, so the child keeps the parent's mappings of them
// (MAP_SHARED, untouched here: they lie in reservable space, which only the
// pieces of emMemMap are remapped in).

#include "internal.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>

namespace ember::driver::detail {
namespace {

void before_fork() {
  scheduler_before_fork(); // lock order: scheduler, mutex, ranges_mutex
  state().mutex.lock();
  state().ranges_mutex.lock();
  callback_mutex().lock(); // a notify() on another thread holds it briefly
}

void after_fork_parent() {
  callback_mutex().unlock();
  state().ranges_mutex.unlock();
  state().mutex.unlock();
  scheduler_after_fork_parent();
}

// Copies the data (not the holes) of `from` into `to`, reading through the
// read/write view at `rw`. Only system calls: the child of a multithreaded
// process may not allocate.
bool copy_file_data(int from, int to, const char* rw, size_t capacity) {
  off_t pos = 0;
  while (static_cast<size_t>(pos) < capacity) {
    const off_t data = lseek(from, pos, SEEK_DATA);
    if (data < 0) return errno == ENXIO; // ENXIO: no data after pos
    off_t hole = lseek(from, data, SEEK_HOLE);
    if (hole < 0) return false;
    for (off_t at = data; at < hole;) {
      const ssize_t n = pwrite(to, rw + at, static_cast<size_t>(hole - at), at);
      if (n <= 0) return false;
      at += n;
    }
    pos = hole;
  }
  return true;
}

void after_fork_child() {
  State& s = state();
  Region& region = s.region;
  for (int d = 0; d < kNumDevices && region.base != nullptr; ++d) {
    const int inherited = region.fds[d];
    if (inherited < 0) continue;
    const int own = new_device_file(d, region.capacity);
    if (own >= 0 &&
        copy_file_data(inherited, own, region.device_base(d) + region.offset,
                       region.capacity) &&
        map_views(region, d, own) && remap_pieces(region, d, own)) {
      region.fds[d] = own;
    } else {
      // Best effort: keep sharing the parent's memory, but never punch it.
      if (own >= 0) close(own);
      region.fds[d] = -1;
      static const char msg[] =
          "ember driver: forked child shares device memory with its parent\n";
      (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    }
    close(inherited);
  }
  callback_mutex().unlock();
  s.ranges_mutex.unlock();
  s.mutex.unlock();
  scheduler_after_fork_child();
}

} // namespace

void install_fork_handlers() {
  pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

} // namespace ember::driver::detail
