#include "distributed/EcclLink.h"

// ember-book: begin eccl_link
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

namespace ember::eccl {
namespace {

constexpr size_t kHeaderBytes = (sizeof(LinkHeader) + 4095) / 4096 * 4096;
constexpr uint32_t kAborted = 1;

size_t slotsBytes(int world) {
  return static_cast<size_t>(world) * kSlots * kChunkBytes;
}

// No FUTEX_PRIVATE_FLAG: the word is shared with other processes. The
// sleeper registers before the kernel rechecks `value` against `seen`; a
// waker stores `value`, then reads `sleepers` behind a full fence: one of
// the two sees the other, so no wake is lost (and the timeout bounds
// the sleep anyway).
void futexWait(Counter& counter, uint32_t seen, std::chrono::microseconds most) {
  timespec limit{0, static_cast<long>(most.count()) * 1000};
  counter.sleepers.fetch_add(1);
  syscall(SYS_futex, &counter.value, FUTEX_WAIT, seen, &limit, nullptr, 0);
  counter.sleepers.fetch_sub(1);
}

// A process that ended is gone, or a zombie its parent has not reaped yet.
bool processAlive(int pid) {
  if (pid <= 0) return true; // not known yet
  if (::kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string skip, state;
  stat >> skip >> skip >> state; // "pid (comm) state": comm has no spaces here
  return !(state == "Z" || state == "X");
}

} // namespace

size_t linkBytes(int world) {
  // Rank slots, then a channel for every ordered pair of ranks.
  return kHeaderBytes + slotsBytes(world) +
      static_cast<size_t>(world) * world * kSlots * kChunkBytes;
}

void wakeAll(Counter& counter) {
  // The caller's store to `value` before the load of `sleepers` (a release
  // store alone may pass a later load).
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (counter.sleepers.load() == 0) return; // spinning waiters see the value
  syscall(SYS_futex, &counter.value, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void throwFailure(const std::string& message) {
  TORCH_CHECK(false, message);
}

Session::Session(char* base, int rank, int world,
                 std::chrono::milliseconds timeout, std::string what)
    : header_(reinterpret_cast<LinkHeader*>(base)),
      data_(base + kHeaderBytes),
      rank_(rank),
      world_(world),
      deadline_(std::chrono::steady_clock::now() + timeout),
      timeout_(timeout),
      what_(std::move(what)) {
  // Only this rank writes its own counters: they say where it stands.
  round_ = header_->ranks[rank_].posted.value.load(std::memory_order_relaxed);
}

void Session::abort(const std::string& reason) {
  uint32_t expected = 0;
  if (header_->aborted.value.compare_exchange_strong(expected, kAborted)) {
    std::snprintf(header_->reason, sizeof(header_->reason), "rank %d: %s",
                  rank_, reason.c_str());
  }
  // Wake every waiter of every counter, so that each sees the abort.
  wakeAll(header_->aborted);
  for (auto& control : header_->ranks) {
    wakeAll(control.announced);
    wakeAll(control.posted);
    wakeAll(control.consumed);
  }
  for (auto& row : header_->channels) {
    for (auto& channel : row) {
      wakeAll(channel.sent);
      wakeAll(channel.received);
    }
  }
}
} // namespace ember::eccl
// ember-book: end eccl_link

// ember-book: begin eccl_link_wait
namespace ember::eccl {

void Session::waitAtLeast(Counter& counter, uint32_t target, int peer,
                          const char* waiting_for) {
  // A short spin serves the common case, a peer a few microseconds behind;
  // then sleep in the futex, waking each millisecond to check on the peer.
  // (No sched_yield in between: on a busy machine it hands the core to
  // another process for a whole time slice, while a woken sleeper runs soon.)
  for (int spin = 0; spin < 256; ++spin) {
    if (counter.value.load(std::memory_order_acquire) >= target) return;
  }
  auto next_check = std::chrono::steady_clock::now();
  for (;;) {
    const uint32_t seen = counter.value.load(std::memory_order_acquire);
    if (seen >= target) return;
    giveUpIfStuck(peer, waiting_for, next_check);
    futexWait(counter, seen, std::chrono::microseconds(1000));
  }
}

void Session::giveUpIfStuck(
    int peer, const char* waiting_for,
    std::chrono::steady_clock::time_point& next_check) {
  if (header_->aborted.value.load(std::memory_order_acquire) != 0) {
    header_->reason[sizeof(header_->reason) - 1] = '\0';
    throwFailure(c10::str(what_, ": the group was aborted by ",
                          header_->reason));
  }
  const auto now = std::chrono::steady_clock::now();
  if (now < next_check) return;
  const int pid = header_->ranks[peer].pid.load(std::memory_order_relaxed);
  if (!processAlive(pid)) {
    // No pid in the message: the rank says which process, and the error
    // reads the same in every run.
    const std::string reason = c10::str(
        what_, ": rank ", peer, "'s process exited while rank ", rank_,
        " waited for ", waiting_for);
    abort(reason);
    throwFailure(reason);
  }
  if (now >= deadline_) {
    const std::string reason = c10::str(
        what_, ": timed out after ", timeout_.count(), " ms on rank ", rank_,
        ", waiting for ", waiting_for, " from rank ", peer);
    abort(reason);
    throwFailure(reason);
  }
  next_check = now + std::chrono::milliseconds(20);
}
} // namespace ember::eccl
// ember-book: end eccl_link_wait

// ember-book: begin eccl_link_agree
namespace ember::eccl {

void Session::agree(const Descriptor& mine) {
  RankControl& me = header_->ranks[rank_];
  seq_ = mine.seq;
  me.pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  // The slot of this parity was last read for collective seq - 2; every peer
  // announced seq - 1 (we saw it in the previous collective), so none still
  // reads it.
  me.descriptors[mine.seq % 2] = mine;
  me.announced.value.store(static_cast<uint32_t>(mine.seq),
                           std::memory_order_release);
  wakeAll(me.announced);
  for (const int peer : c10::irange(world_)) {
    if (peer == rank_) continue;
    waitAtLeast(header_->ranks[peer].announced,
                static_cast<uint32_t>(mine.seq), peer, "its call");
    const Descriptor& theirs = descriptorOf(peer);
    std::string mismatch;
    if (theirs.op != mine.op) {
      mismatch = c10::str("rank ", peer, " called ", theirs.name, ", rank ", rank_, " ",
                          mine.name);
    } else if (theirs.dtype != mine.dtype) {
      mismatch = c10::str("rank ", peer, " passed ",
                          static_cast<c10::ScalarType>(theirs.dtype),
                          " tensors, rank ", rank_, " ",
                          static_cast<c10::ScalarType>(mine.dtype));
    } else if (theirs.numel != mine.numel) {
      mismatch = c10::str("rank ", peer, " passed ", theirs.numel,
                          " elements, rank ", rank_, " ", mine.numel);
    } else if (theirs.root != mine.root || theirs.reduce != mine.reduce) {
      mismatch = c10::str("rank ", peer, " named another root or reduce op");
    }
    if (!mismatch.empty()) {
      throwFailure(c10::str(what_, ": the ranks disagree: ", mismatch,
                            " (every rank must make the same call)"));
    }
  }
  if (mine.numel < 0) checkPairs();
}

void Session::checkPairs() const {
  const auto dtype = static_cast<c10::ScalarType>(descriptorOf(rank_).dtype);
  const auto item = static_cast<int64_t>(c10::elementSize(dtype));
  for (const int from : c10::irange(world_)) {
    for (const int to : c10::irange(world_)) {
      const int64_t sent = descriptorOf(from).sends[to];
      const int64_t expected = descriptorOf(to).recvs[from];
      if (sent != expected) {
        throwFailure(c10::str(
            what_, ": the ranks disagree: rank ", from, " sends rank ", to,
            " ", sent / item, " elements, and rank ", to, " expects ",
            expected / item, " from it (its output sizes, or its "
            "output_split_sizes, must match what each rank sends it)"));
      }
    }
  }
}

const Descriptor& Session::descriptorOf(int rank) const {
  // By this collective's parity, not by the peer's latest announcement: a
  // root that needs nobody's data may have finished and announced the next.
  return header_->ranks[rank].descriptors[seq_ % 2];
}
} // namespace ember::eccl
// ember-book: end eccl_link_agree

// ember-book: begin eccl_link_rounds
namespace ember::eccl {

char* Session::rankSlot(int rank, uint32_t round) {
  return data_ + (static_cast<size_t>(rank) * kSlots + round % kSlots) *
      kChunkBytes;
}

char* Session::nextSlot() {
  // The slot was last used kSlots rounds ago: wait until all have read it.
  if (round_ >= static_cast<uint32_t>(kSlots)) {
    for (const int peer : c10::irange(world_)) {
      if (peer == rank_) continue;
      waitAtLeast(header_->ranks[peer].consumed, round_ + 1 - kSlots, peer,
                  "a free slot");
    }
  }
  return rankSlot(rank_, round_);
}

void Session::post() {
  RankControl& me = header_->ranks[rank_];
  me.posted.value.store(round_ + 1, std::memory_order_release);
  wakeAll(me.posted);
}

const char* Session::peerSlot(int rank) {
  if (rank != rank_) {
    waitAtLeast(header_->ranks[rank].posted, round_ + 1, rank, "its data");
  }
  return rankSlot(rank, round_);
}

void Session::finishRound() {
  RankControl& me = header_->ranks[rank_];
  ++round_;
  me.consumed.value.store(round_, std::memory_order_release);
  wakeAll(me.consumed);
}

char* Session::channelSlot(int from, int to, uint32_t index) {
  const size_t channel = static_cast<size_t>(from) * world_ + to;
  return data_ + slotsBytes(world_) +
      (channel * kSlots + index % kSlots) * kChunkBytes;
}

void Session::send(int to, const void* data, size_t bytes) {
  TORCH_INTERNAL_ASSERT(bytes <= kChunkBytes);
  ChannelControl& channel = header_->channels[rank_][to];
  const uint32_t index = channel.sent.value.load(std::memory_order_relaxed);
  if (index >= static_cast<uint32_t>(kSlots)) {
    waitAtLeast(channel.received, index + 1 - kSlots, to, "a free slot");
  }
  std::memcpy(channelSlot(rank_, to, index), data, bytes);
  channel.sent.value.store(index + 1, std::memory_order_release);
  wakeAll(channel.sent);
}

const char* Session::peekChannel(int from) {
  ChannelControl& channel = header_->channels[from][rank_];
  const uint32_t index = channel.received.value.load(std::memory_order_relaxed);
  waitAtLeast(channel.sent, index + 1, from, "its data");
  return channelSlot(from, rank_, index);
}

void Session::releaseChannel(int from) {
  ChannelControl& channel = header_->channels[from][rank_];
  channel.received.value.fetch_add(1, std::memory_order_release);
  wakeAll(channel.received);
}

bool Session::hasChunk(int from) {
  ChannelControl& channel = header_->channels[from][rank_];
  return channel.sent.value.load(std::memory_order_acquire) >
      channel.received.value.load(std::memory_order_relaxed);
}

void Session::pause(const char* waiting_for) {
  const auto next_check = next_pause_check_;
  for (const int peer : c10::irange(world_)) {
    if (peer == rank_) continue;
    next_pause_check_ = next_check; // every peer checked at the same pause
    giveUpIfStuck(peer, waiting_for, next_pause_check_);
  }
  std::this_thread::sleep_for(std::chrono::microseconds(50));
}

void Session::recv(int from, void* data, size_t bytes) {
  std::memcpy(data, peekChannel(from), bytes);
  releaseChannel(from);
}

} // namespace ember::eccl
// ember-book: end eccl_link_rounds
