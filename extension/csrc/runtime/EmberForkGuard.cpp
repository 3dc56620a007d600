// Fork safety: ember refuses to run in a child forked after it was used.
#include <c10/core/DeviceType.h>
#include <c10/util/Exception.h>
#include <pthread.h>
#include <torch/library.h>

#include <atomic>

// ember-book: begin fork_guard
#include <pthread.h> // pthread_atfork

namespace ember {

// fork() copies the process's memory but only the thread that called it.
// Whatever another thread was doing above the driver at that moment (holding
// the device cache's lock, halfway through updating its lists) is frozen in
// the child's copy, with no thread left to finish it. CUDA refuses to run in
// such a child; ember does the same, with the same advice. A child forked
// before ember was first used is fine, and so is a child that never touches
// ember (DataLoader workers over CPU data).
std::atomic<bool> in_bad_fork{false};

void markBadFork() {
  in_bad_fork.store(true, std::memory_order_relaxed);
}

bool inBadFork() {
  return in_bad_fork.load(std::memory_order_relaxed);
}

// Called on every allocation: the first one in a process is what "ember was
// used" means, and arms the check for children forked after it.
void checkNotForked() {
  TORCH_CHECK(!inBadFork(),
              "Cannot re-initialize ember in forked subprocess: it was used "
              "in the parent process before fork(). To use ember (device type '",
              c10::get_privateuse1_backend(), "') with multiprocessing, you "
              "must use the 'spawn' start method (multiprocessing."
              "set_start_method('spawn'), or multiprocessing_context='spawn' "
              "for a DataLoader)");
  static const bool armed = [] {
    return pthread_atfork(nullptr, nullptr, &markBadFork) == 0;
  }();
  (void)armed;
}

// The device module's _is_in_bad_fork() (torch.manual_seed skips seeding a
// device in a bad fork) asks through this operator. A boxed kernel: it takes
// nothing, so PyTorch's unboxing machinery (slow to compile) buys nothing.
void inBadForkKernel(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  torch::jit::push(*stack, inBadFork());
}

} // namespace ember

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("_in_bad_fork() -> bool",
        torch::CppFunction::makeFromBoxedFunction<&ember::inBadForkKernel>());
}
// ember-book: end fork_guard
