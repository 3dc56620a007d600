// eccl's transport: the link between the group's simulated devices, and the
// protocol the collectives' kernels speak over it.
#pragma once

// ember-book: begin eccl_link_api
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace ember::eccl {

constexpr int kMaxRanks = 8;
// A staging slot: small enough that a peer reads it from cache (L2 or the
// shared L3), not memory; large enough that the handoffs between ranks (a
// wait and a wake each) are few: a 64 MiB all-reduce makes 64 of them.
constexpr size_t kChunkBytes = 1024 * 1024;
// Slots per rank (and per channel): how far a rank may run ahead of its
// slowest reader.
constexpr int kSlots = 4;

// What a rank is about to do. Every rank checks that the others agree before
// moving data: a mismatch is an error on every rank, never a hang.
struct Descriptor {
  uint64_t seq = 0;     // the collective's number in the group, from 1
  int32_t op = 0;       // which collective (c10d::OpType)
  char name[24] = {};   // its name, for the error
  int32_t dtype = 0;    // c10::ScalarType
  int64_t numel = 0;    // per rank, as each collective defines it
  int64_t root = -1;    // broadcast, reduce
  int32_t reduce = -1;  // c10d::ReduceOp
  int32_t world = 0;
  // The pairwise collectives (numel -1: all_to_all, all_gather, gather,
  // scatter, reduce_scatter's list form): the bytes this rank sends each
  // rank, and expects from each. Every rank checks the whole matrix, so a
  // mismatch fails them all alike.
  int64_t sends[kMaxRanks] = {};
  int64_t recvs[kMaxRanks] = {};
};

// A futex word: waiters sleep in the kernel, across processes. `sleepers`
// counts the waiters in the futex, so that a rank that moves `value` makes
// the wake system call only when someone sleeps.
struct alignas(64) Counter {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
};

struct alignas(64) RankControl {
  Counter announced; // seq of the latest descriptor this rank wrote
  Counter posted;    // rounds this rank has published
  Counter consumed;  // rounds this rank has finished reading
  std::atomic<int32_t> pid{0};
  Descriptor descriptors[2]; // by seq parity
};

struct ChannelControl {
  Counter sent;     // chunks the sender has written
  Counter received; // chunks the receiver has read
};

// The start of the shared memory; every field starts zero.
struct LinkHeader {
  Counter aborted; // set by the first rank that gives up
  char reason[512];
  RankControl ranks[kMaxRanks];
  ChannelControl channels[kMaxRanks][kMaxRanks]; // [sender][receiver]
};

// Bytes of the link for a group of `world` ranks.
size_t linkBytes(int world);

// One rank's view of the link inside a collective's kernel, at the kernel's
// offset. Every wait ends: when the peer arrives, when any rank aborts the
// group, when a peer's process is gone, or at the deadline; the error names
// the collective.
class Session {
 public:
  Session(char* base, int rank, int world, std::chrono::milliseconds timeout,
          std::string what);

  int rank() const { return rank_; }
  int world() const { return world_; }

  // Publishes this rank's descriptor and checks it against every peer's.
  void agree(const Descriptor& mine);
  // `rank`'s descriptor of the collective agreed on.
  const Descriptor& descriptorOf(int rank) const;

  // Rounds: every rank publishes a chunk (maybe empty) into its slot, then
  // reads any rank's slot of the same round. nextSlot waits until all ranks
  // have read what that slot held before.
  char* nextSlot();
  void post();                // the chunk is in the slot
  const char* peerSlot(int rank); // waits until `rank` posted this round
  void finishRound();         // done reading this round's slots

  // Channels: ordered chunks from this rank to one peer.
  void send(int to, const void* data, size_t bytes);
  void recv(int from, void* data, size_t bytes);
  // recv's chunk, in place: read it, then release it.
  const char* peekChannel(int from);
  void releaseChannel(int from);
  // Whether `from` has a chunk waiting for this rank (no wait).
  bool hasChunk(int from);
  // A wait on several peers at once, a short sleep at a time: each call
  // checks for an abort, a peer gone and the deadline, as every wait does.
  void pause(const char* waiting_for);

  // Gives up: every waiting rank sees the group aborted, with `reason`.
  void abort(const std::string& reason);

 private:
  // The pairwise collectives' check: what each rank sends each other is
  // what that one expects. The same verdict on every rank.
  void checkPairs() const;
  void waitAtLeast(Counter& counter, uint32_t target, int peer,
                   const char* waiting_for);
  // Raises if the group aborted; and, from `next_check` on (then pushed
  // 20 ms on), if `peer`'s process is gone or the deadline passed.
  void giveUpIfStuck(int peer, const char* waiting_for,
                     std::chrono::steady_clock::time_point& next_check);
  char* rankSlot(int rank, uint32_t round);
  char* channelSlot(int from, int to, uint32_t index);

  LinkHeader* header_;
  char* data_;
  int rank_;
  int world_;
  std::chrono::steady_clock::time_point deadline_;
  std::chrono::milliseconds timeout_;
  std::string what_;
  uint32_t round_ = 0; // this rank's rounds so far (the same on every rank)
  uint64_t seq_ = 0;   // the collective agreed on
  std::chrono::steady_clock::time_point next_pause_check_{}; // pause's
};

// Raised by a Session: the message already names the collective.
void throwFailure(const std::string& message);

// Wakes every waiter on `counter`, in every process.
void wakeAll(Counter& counter);

} // namespace ember::eccl
// ember-book: end eccl_link_api
