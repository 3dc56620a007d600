#include "distributed/EcclCollectives.h"

// ember-book: begin eccl_reduce_ops
#include <ATen/Dispatch.h>
#include <c10/util/Exception.h>
#include <c10/util/env.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#pragma GCC push_options
#pragma GCC optimize("O3") // the reductions are the collectives' arithmetic
namespace ember::eccl {
namespace {
template <typename T>
void combine(T* dst, const T* src, int64_t n, RedOp op) {
  switch (op) {
    case RedOp::SUM:
    case RedOp::AVG:
      for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] + src[i];
      return;
    case RedOp::PRODUCT:
      for (int64_t i = 0; i < n; ++i) dst[i] = dst[i] * src[i];
      return;
    case RedOp::MIN:
    case RedOp::MAX:
      if constexpr (c10::is_complex<T>::value) {
        break; // refused before launch
      } else if (op == RedOp::MIN) {
        for (int64_t i = 0; i < n; ++i) dst[i] = std::min(dst[i], src[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) dst[i] = std::max(dst[i], src[i]);
      }
      return;
    default:
      break;
  }
  TORCH_CHECK(false, "eccl: reduce op ", static_cast<int>(op),
              " reached a kernel");
}

// bool: SUM is "any", PRODUCT "all", as in PyTorch's own reductions.
void combineBool(bool* dst, const bool* src, int64_t n, RedOp op) {
  for (int64_t i = 0; i < n; ++i) {
    switch (op) {
      case RedOp::SUM:
      case RedOp::MAX:
        dst[i] = dst[i] || src[i];
        break;
      default: // PRODUCT, MIN
        dst[i] = dst[i] && src[i];
    }
  }
}

} // namespace

void reduceInto(void* dst, const void* src, int64_t n, c10::ScalarType dtype,
                RedOp op) {
  if (dtype == c10::kBool) {
    combineBool(static_cast<bool*>(dst), static_cast<const bool*>(src), n, op);
    return;
  }
  AT_DISPATCH_ALL_TYPES_AND_COMPLEX_AND2(
      c10::kHalf, c10::kBFloat16, dtype, "eccl_reduce", [&] {
        combine(static_cast<scalar_t*>(dst),
                static_cast<const scalar_t*>(src), n, op);
      });
}

void divideBy(void* dst, int64_t n, c10::ScalarType dtype, int64_t divisor) {
  AT_DISPATCH_FLOATING_AND_COMPLEX_TYPES_AND2(
      c10::kHalf, c10::kBFloat16, dtype, "eccl_avg", [&] {
        auto* values = static_cast<scalar_t*>(dst);
        for (int64_t i = 0; i < n; ++i) {
          values[i] = values[i] / static_cast<scalar_t>(divisor);
        }
      });
}

} // namespace ember::eccl
// ember-book: end eccl_reduce_ops

// ember-book: begin eccl_one_shot
namespace ember::eccl {
namespace {

size_t itemSize(c10::ScalarType dtype) {
  return c10::elementSize(dtype);
}

// Elements per staging chunk.
int64_t chunkElements(c10::ScalarType dtype) {
  return static_cast<int64_t>(kChunkBytes / itemSize(dtype));
}

// Rank-ordered reduction of one round's chunk into dst: every rank adds in
// the same order, so every rank gets the same bits.
void reduceRound(Session& s, char* dst, int64_t n, c10::ScalarType dtype,
                 RedOp op) {
  const size_t bytes = static_cast<size_t>(n) * itemSize(dtype);
  std::memcpy(dst, s.peerSlot(0), bytes);
  for (const int peer : c10::irange(1, s.world())) {
    reduceInto(dst, s.peerSlot(peer), n, dtype, op);
  }
}

// Every rank publishes all of its data, chunk by chunk; the ranks that get
// the result (`root`, or all of them for root -1) reduce every rank's chunk.
void oneShot(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
             RedOp op, int root) {
  const int64_t per = chunkElements(dtype);
  const bool receives = root < 0 || s.rank() == root;
  for (int64_t begin = 0; begin < numel; begin += per) {
    const int64_t n = std::min(per, numel - begin);
    char* chunk = data + begin * itemSize(dtype);
    std::memcpy(s.nextSlot(), chunk, n * itemSize(dtype));
    s.post();
    if (receives) reduceRound(s, chunk, n, dtype, op);
    s.finishRound();
  }
  if (receives && op == RedOp::AVG) divideBy(data, numel, dtype, s.world());
}

} // namespace
} // namespace ember::eccl
// ember-book: end eccl_one_shot

// ember-book: begin eccl_ring
namespace ember::eccl {
namespace {

// The ring: a reduce-scatter, then an all-gather, each world - 1 steps of
// one block. Each rank sends and receives 2 (world - 1) / world of the data,
// whatever the world size; the one-shot sends all of it and reads all of
// every peer's. The two phases meet in one loop: each chunk the last
// reduce-scatter step completes goes on to the next rank at once, while it
// is still in cache (it is the all-gather's first send), and the
// all-gather's first chunk from the previous rank comes in between, in the
// order the previous rank sends them.
void allReduceRing(Session& s, char* data, int64_t numel,
                   c10::ScalarType dtype, RedOp op) {
  const int world = s.world();
  const int rank = s.rank();
  const int next = (rank + 1) % world;
  const int prev = (rank + world - 1) % world;
  const int64_t block = (numel + world - 1) / world;
  const size_t item = itemSize(dtype);
  auto blockBegin = [&](int b) { return std::min<int64_t>(b * block, numel); };
  auto blockSize = [&](int b) { return blockBegin(b + 1) - blockBegin(b); };
  const int64_t per = chunkElements(dtype);
  // `completes`: the last reduce-scatter step, fused with the all-gather's
  // first (which sends the block this step completes, and receives this
  // rank's block from the previous rank, where that one completed it).
  auto step = [&](int send_block, int recv_block, bool accumulate,
                  bool completes) {
    const int64_t sends = blockSize(send_block);
    const int64_t recvs = blockSize(recv_block);
    const int64_t gathers = completes ? blockSize(rank) : 0;
    char* out = data + blockBegin(send_block) * item;
    char* in = data + blockBegin(recv_block) * item;
    char* gathered = data + blockBegin(rank) * item;
    for (int64_t at = 0; at < std::max({sends, recvs, gathers}); at += per) {
      if (at < sends) {
        s.send(next, out + at * item, std::min(per, sends - at) * item);
      }
      if (at < recvs) {
        const int64_t n = std::min(per, recvs - at);
        char* chunk = in + at * item;
        if (accumulate) {
          reduceInto(chunk, s.peekChannel(prev), n, dtype, op);
          s.releaseChannel(prev);
        } else {
          s.recv(prev, chunk, n * item);
        }
        if (completes) {
          if (op == RedOp::AVG) divideBy(chunk, n, dtype, world);
          s.send(next, chunk, n * item);
        }
      }
      if (at < gathers) {
        s.recv(prev, gathered + at * item, std::min(per, gathers - at) * item);
      }
    }
  };
  for (const int k : c10::irange(world - 1)) {
    step((rank - k + world) % world, (rank - k - 1 + world) % world, true,
         k == world - 2);
  }
  for (const int k : c10::irange(1, world - 1)) {
    step((rank + 1 - k + world) % world, (rank - k + world) % world, false,
         false);
  }
}

} // namespace

Algorithm chooseAllreduce(size_t bytes, int world) {
  // EMBER_ECCL_ALGO=one_shot|ring overrides, for measuring both. Read at
  // each call (a getenv, next to a collective's microseconds), so that one
  // process can measure both.
  const std::optional<std::string> forced =
      c10::utils::get_env("EMBER_ECCL_ALGO");
  if (forced == "ring") return Algorithm::kRing;
  if (forced == "one_shot") return Algorithm::kOneShot;
  // Below half a chunk, latency decides: the one-shot waits for its peers
  // once, the ring 2 (world - 1) times in a row. From there the ring's
  // smaller share of the additions ((world - 1) / world of the data, against
  // world - 1 times it) outweighs its handoffs, and on more than two ranks
  // it also reads less (2 (world - 1) / world of the data, against
  // world - 1 times it). The same threshold on any number of ranks.
  (void)world;
  return bytes >= kChunkBytes / 2 ? Algorithm::kRing : Algorithm::kOneShot;
}

const char* algorithmName(Algorithm algorithm) {
  return algorithm == Algorithm::kRing ? "ring" : "one_shot";
}

void allReduce(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
               RedOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::kRing && s.world() > 1) {
    allReduceRing(s, data, numel, dtype, op);
    return;
  }
  oneShot(s, data, numel, dtype, op, /*root=*/-1);
}

} // namespace ember::eccl
// ember-book: end eccl_ring

// ember-book: begin eccl_gather_scatter
namespace ember::eccl {
namespace {

// Bytes rank `from` sends rank `to` in the pairwise collective agreed on.
size_t sendsTo(const Session& s, int from, int to) {
  return static_cast<size_t>(s.descriptorOf(from).sends[to]);
}

// Bytes [begin, end) of the blocks laid end to end, into `into`.
template <typename Pointer>
void copyStretch(const std::vector<Pointer>& blocks,
                 const std::vector<size_t>& lengths, size_t begin, size_t end,
                 char* into) {
  size_t at = 0;
  for (const size_t b : c10::irange(blocks.size())) {
    const size_t lo = std::max(begin, at);
    const size_t hi = std::min(end, at + lengths[b]);
    if (lo < hi) {
      std::memcpy(into + (lo - begin), blocks[b] + (lo - at), hi - lo);
    }
    at += lengths[b];
    if (at >= end) return;
  }
}

} // namespace

void broadcast(Session& s, char* data, size_t bytes, int root) {
  for (size_t begin = 0; begin < bytes; begin += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - begin);
    char* slot = s.nextSlot();
    if (s.rank() == root) std::memcpy(slot, data + begin, n);
    s.post();
    if (s.rank() != root) std::memcpy(data + begin, s.peerSlot(root), n);
    s.finishRound();
  }
}

void reduce(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
            RedOp op, int root) {
  oneShot(s, data, numel, dtype, op, root);
}

void allGather(Session& s, const char* input, size_t bytes,
               const std::vector<char*>& outputs) {
  const int rank = s.rank();
  size_t longest = 0;
  for (const int peer : c10::irange(s.world())) {
    for (const int q : c10::irange(s.world())) {
      longest = std::max(longest, sendsTo(s, peer, q));
    }
  }
  for (size_t begin = 0; begin < longest; begin += kChunkBytes) {
    char* slot = s.nextSlot();
    if (begin < bytes) {
      std::memcpy(slot, input + begin, std::min(kChunkBytes, bytes - begin));
    }
    s.post();
    for (const int peer : c10::irange(outputs.empty() ? 0 : s.world())) {
      const size_t length = sendsTo(s, peer, rank);
      if (begin >= length) continue;
      // memmove: the output block of this rank may be its input.
      std::memmove(outputs[peer] + begin, s.peerSlot(peer),
                   std::min(kChunkBytes, length - begin));
    }
    s.finishRound();
  }
}

void scatter(Session& s, const std::vector<const char*>& inputs, char* output,
             int root) {
  // The root publishes its inputs one after another, as one stream of
  // chunks; each rank copies out the stretch that is its block.
  const int world = s.world();
  std::vector<size_t> lengths(world);
  size_t total = 0, mine = 0;
  for (const int q : c10::irange(world)) {
    lengths[q] = sendsTo(s, root, q);
    if (q == s.rank()) mine = total;
    total += lengths[q];
  }
  const size_t length = lengths[s.rank()];
  for (size_t begin = 0; begin < total; begin += kChunkBytes) {
    const size_t end = std::min(begin + kChunkBytes, total);
    char* slot = s.nextSlot();
    if (s.rank() == root) copyStretch(inputs, lengths, begin, end, slot);
    s.post();
    const size_t lo = std::max(begin, mine);
    const size_t hi = std::min(end, mine + length);
    if (lo < hi) {
      std::memcpy(output + (lo - mine), s.peerSlot(root) + (lo - begin),
                  hi - lo);
    }
    s.finishRound();
  }
}

} // namespace ember::eccl
// ember-book: end eccl_gather_scatter

// ember-book: begin eccl_reduce_scatter
namespace ember::eccl {

void reduceScatter(Session& s, const char* input, char* output, int64_t numel,
                   c10::ScalarType dtype, RedOp op) {
  // Every rank publishes its whole input; rank r reduces block r of it.
  const int64_t per = chunkElements(dtype);
  const int64_t total = numel * s.world();
  const int64_t mine = numel * s.rank();
  const size_t item = itemSize(dtype);
  for (int64_t begin = 0; begin < total; begin += per) {
    const int64_t n = std::min(per, total - begin);
    std::memcpy(s.nextSlot(), input + begin * item, n * item);
    s.post();
    const int64_t lo = std::max(begin, mine);
    const int64_t hi = std::min(begin + n, mine + numel);
    if (lo < hi) {
      char* dst = output + (lo - mine) * item;
      std::memcpy(dst, s.peerSlot(0) + (lo - begin) * item, (hi - lo) * item);
      for (const int peer : c10::irange(1, s.world())) {
        reduceInto(dst, s.peerSlot(peer) + (lo - begin) * item, hi - lo,
                   dtype, op);
      }
    }
    s.finishRound();
  }
  if (op == RedOp::AVG) divideBy(output, numel, dtype, s.world());
}

void reduceScatterBlocks(Session& s, const std::vector<const char*>& inputs,
                         char* output, c10::ScalarType dtype, RedOp op) {
  // Every rank publishes its blocks one after another, as one stream of
  // chunks (block q as long as rank q's output: the same stream layout on
  // every rank); rank r reduces the stretch that is block r.
  const int world = s.world();
  const int rank = s.rank();
  std::vector<size_t> lengths(world);
  size_t total = 0, mine = 0;
  for (const int q : c10::irange(world)) {
    lengths[q] = sendsTo(s, rank, q);
    if (q == rank) mine = total;
    total += lengths[q];
  }
  const size_t item = itemSize(dtype);
  for (size_t begin = 0; begin < total; begin += kChunkBytes) {
    const size_t end = std::min(begin + kChunkBytes, total);
    copyStretch(inputs, lengths, begin, end, s.nextSlot());
    s.post();
    const size_t lo = std::max(begin, mine);
    const size_t hi = std::min(end, mine + lengths[rank]);
    if (lo < hi) {
      char* dst = output + (lo - mine);
      std::memcpy(dst, s.peerSlot(0) + (lo - begin), hi - lo);
      for (const int peer : c10::irange(1, world)) {
        reduceInto(dst, s.peerSlot(peer) + (lo - begin),
                   static_cast<int64_t>((hi - lo) / item), dtype, op);
      }
    }
    s.finishRound();
  }
  if (op == RedOp::AVG) {
    divideBy(output, static_cast<int64_t>(lengths[rank] / item), dtype, world);
  }
}

void allToAll(Session& s, const std::vector<const char*>& inputs,
              const std::vector<char*>& outputs) {
  // Each rank publishes its inputs one after another, as one stream of
  // chunks; each rank copies out, from every peer's stream, its own block.
  const int world = s.world();
  const int rank = s.rank();
  std::vector<size_t> mine(world), from(world), length(world);
  size_t longest = 0, total = 0;
  for (const int q : c10::irange(world)) {
    mine[q] = sendsTo(s, rank, q);
    total += mine[q];
  }
  for (const int peer : c10::irange(world)) {
    size_t offset = 0; // where peer's block for this rank starts
    for (const int q : c10::irange(rank)) offset += sendsTo(s, peer, q);
    from[peer] = offset;
    length[peer] = sendsTo(s, peer, rank);
    size_t sent = 0;
    for (const int q : c10::irange(world)) sent += sendsTo(s, peer, q);
    longest = std::max(longest, sent);
  }
  for (size_t begin = 0; begin < longest; begin += kChunkBytes) {
    const size_t end = begin + kChunkBytes;
    char* slot = s.nextSlot();
    if (begin < total) {
      copyStretch(inputs, mine, begin, std::min(end, total), slot);
    }
    s.post();
    for (const int peer : c10::irange(world)) {
      const size_t lo = std::max(begin, from[peer]);
      const size_t hi = std::min(end, from[peer] + length[peer]);
      if (lo < hi) {
        std::memcpy(outputs[peer] + (lo - from[peer]),
                    s.peerSlot(peer) + (lo - begin), hi - lo);
      }
    }
    s.finishRound();
  }
}

} // namespace ember::eccl
// ember-book: end eccl_reduce_scatter

// ember-book: begin eccl_point_to_point
namespace ember::eccl {

namespace {
struct MessageHeader {
  uint64_t bytes;
  int32_t dtype;
  int32_t tag;
};

void checkMessage(const Session& s, int from, int tag, size_t sent_bytes,
                  int32_t sent_dtype, size_t bytes, c10::ScalarType dtype) {
  TORCH_CHECK(sent_bytes == bytes &&
                  sent_dtype == static_cast<int32_t>(dtype),
              "rank ", from, " sent ", sent_bytes, " bytes of ",
              static_cast<c10::ScalarType>(sent_dtype), " with tag ", tag,
              ", rank ", s.rank(), " receives ", bytes, " bytes of ", dtype);
}
} // namespace

void send(Session& s, int to, int tag, const char* data, size_t bytes,
          c10::ScalarType dtype) {
  const MessageHeader header{bytes, static_cast<int32_t>(dtype), tag};
  s.send(to, &header, sizeof(header));
  for (size_t begin = 0; begin < bytes; begin += kChunkBytes) {
    s.send(to, data + begin, std::min(kChunkBytes, bytes - begin));
  }
}

namespace {
// Reads the next message `from` sends: into `data` if it has `tag`, else
// into the mailbox (so that the sender never waits for a receive that comes
// after this one). Whether it was the one.
bool readNext(Session& s, Mailbox& mailbox, int from, int tag, char* data,
              size_t bytes, c10::ScalarType dtype) {
  MessageHeader header{};
  s.recv(from, &header, sizeof(header));
  const bool mine = header.tag == tag;
  if (mine) {
    checkMessage(s, from, tag, header.bytes, header.dtype, bytes, dtype);
  }
  Mailbox::Message early{header.dtype, {}};
  if (!mine) early.data.resize(header.bytes);
  char* into = mine ? data : early.data.data();
  for (size_t begin = 0; begin < header.bytes; begin += kChunkBytes) {
    s.recv(from, into + begin,
           std::min<size_t>(kChunkBytes, header.bytes - begin));
  }
  if (!mine) mailbox.put(from, header.tag, std::move(early));
  return mine;
}
} // namespace

void recv(Session& s, Mailbox& mailbox, int from, int tag, char* data,
          size_t bytes, c10::ScalarType dtype) {
  if (auto early = mailbox.take(from, tag)) {
    checkMessage(s, from, tag, early->data.size(), early->dtype, bytes,
                 dtype);
    std::memcpy(data, early->data.data(), bytes);
    return;
  }
  while (!readNext(s, mailbox, from, tag, data, bytes, dtype)) {
  }
}

int recvAny(Session& s, Mailbox& mailbox, int tag, char* data, size_t bytes,
            c10::ScalarType dtype) {
  for (;;) {
    for (const int from : c10::irange(s.world())) {
      if (from == s.rank()) continue;
      if (auto early = mailbox.take(from, tag)) {
        checkMessage(s, from, tag, early->data.size(), early->dtype, bytes,
                     dtype);
        std::memcpy(data, early->data.data(), bytes);
        return from;
      }
    }
    // No blocking wait on one peer: the first to send, of any rank, is it.
    bool read = false;
    for (const int from : c10::irange(s.world())) {
      if (from == s.rank() || !s.hasChunk(from)) continue;
      if (readNext(s, mailbox, from, tag, data, bytes, dtype)) return from;
      read = true;
    }
    if (!read) s.pause("a message (from any rank)");
  }
}

std::optional<Mailbox::Message> Mailbox::take(int from, int tag) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = waiting_.find({from, tag});
  if (found == waiting_.end() || found->second.empty()) return std::nullopt;
  Message message = std::move(found->second.front());
  found->second.pop_front();
  return message;
}

void Mailbox::put(int from, int tag, Message message) {
  std::lock_guard<std::mutex> lock(mutex_);
  waiting_[{from, tag}].push_back(std::move(message));
}

} // namespace ember::eccl
#pragma GCC pop_options
// ember-book: end eccl_point_to_point