#include "distributed/EcclCollectives.h"

// ember-book: begin eccl_collectives
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
  // One round trip wins while latency dominates. From half a chunk on, the
  // ring's smaller share of the arithmetic (1 / world of it) outweighs its
  // extra handoffs: on 2 ranks, 1.1-1.2x the one-shot's bus bandwidth at
  // 512 KiB, 1.2-1.3x at 1 MiB; below 256 KiB the one-shot is as fast or up
  // to 15 % faster (measured in the same ranks, in turn). On more ranks the
  // one-shot also reads more, so there the ring wins earlier still.
  (void)world;
  return bytes >= kChunkBytes / 2 ? Algorithm::kRing : Algorithm::kOneShot;
}

const char* algorithmName(Algorithm algorithm) {
  return algorithm == Algorithm::kRing ? "ring" : "one_shot";
}

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

void allReduce(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
               RedOp op, Algorithm algorithm) {
  if (algorithm == Algorithm::kRing && s.world() > 1) {
    allReduceRing(s, data, numel, dtype, op);
    return;
  }
  oneShot(s, data, numel, dtype, op, /*root=*/-1);
}

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
  for (size_t begin = 0; begin < bytes; begin += kChunkBytes) {
    const size_t n = std::min(kChunkBytes, bytes - begin);
    std::memcpy(s.nextSlot(), input + begin, n);
    s.post();
    for (const int peer : c10::irange(s.world())) {
      // memmove: the output block of this rank may be its input.
      std::memmove(outputs[peer] + begin, s.peerSlot(peer), n);
    }
    s.finishRound();
  }
}

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

void allToAll(Session& s, const char* input, char* output,
              size_t output_bytes) {
  const int world = s.world();
  const int rank = s.rank();
  // Where each rank's block for this rank lies in its input, and where it
  // goes in this rank's output. The ranks agreed on every descriptor.
  std::vector<size_t> from(world), length(world), to(world);
  size_t longest = 0, expected = 0;
  for (const int peer : c10::irange(world)) {
    const Descriptor& d = s.descriptorOf(peer);
    size_t offset = 0, total = 0;
    for (const int q : c10::irange(world)) {
      if (q == rank) offset = total;
      total += static_cast<size_t>(d.sends[q]);
    }
    from[peer] = offset;
    length[peer] = static_cast<size_t>(d.sends[rank]);
    to[peer] = expected;
    expected += length[peer];
    longest = std::max(longest, total);
  }
  TORCH_CHECK(expected == output_bytes, "rank ", rank, " expects ",
              output_bytes, " bytes, and the others send it ", expected);
  size_t input_bytes = 0; // this rank's whole input
  for (const int q : c10::irange(world)) {
    input_bytes += static_cast<size_t>(s.descriptorOf(rank).sends[q]);
  }
  for (size_t begin = 0; begin < longest; begin += kChunkBytes) {
    const size_t end = begin + kChunkBytes;
    if (begin < input_bytes) {
      std::memcpy(s.nextSlot(), input + begin,
                  std::min(end, input_bytes) - begin);
    } else {
      s.nextSlot();
    }
    s.post();
    for (const int peer : c10::irange(world)) {
      const size_t lo = std::max(begin, from[peer]);
      const size_t hi = std::min(end, from[peer] + length[peer]);
      if (lo < hi) {
        std::memcpy(output + to[peer] + (lo - from[peer]),
                    s.peerSlot(peer) + (lo - begin), hi - lo);
      }
    }
    s.finishRound();
  }
}

namespace {
struct MessageHeader {
  uint64_t bytes;
  int32_t dtype;
};
} // namespace

void send(Session& s, int to, const char* data, size_t bytes,
          c10::ScalarType dtype) {
  const MessageHeader header{bytes, static_cast<int32_t>(dtype)};
  s.send(to, &header, sizeof(header));
  for (size_t begin = 0; begin < bytes; begin += kChunkBytes) {
    s.send(to, data + begin, std::min(kChunkBytes, bytes - begin));
  }
}

void recv(Session& s, int from, char* data, size_t bytes,
          c10::ScalarType dtype) {
  MessageHeader header{};
  s.recv(from, &header, sizeof(header));
  TORCH_CHECK(header.bytes == bytes &&
                  header.dtype == static_cast<int32_t>(dtype),
              "rank ", from, " sent ", header.bytes, " bytes of ",
              static_cast<c10::ScalarType>(header.dtype), ", rank ", s.rank(),
              " receives ", bytes, " bytes of ", dtype);
  for (size_t begin = 0; begin < bytes; begin += kChunkBytes) {
    s.recv(from, data + begin, std::min(kChunkBytes, bytes - begin));
  }
}

} // namespace ember::eccl
#pragma GCC pop_options
// ember-book: end eccl_collectives
