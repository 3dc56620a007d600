// eccl's collectives as kernels run them: data movement over a Session, and
// the element-wise reductions. Every pointer is already at the kernel's
// offset (ember::atOffset).
#pragma once

#include "distributed/EcclLink.h"

// ember-book: begin eccl_collectives_api
#include <c10/core/ScalarType.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace ember::eccl {

using RedOp = c10d::ReduceOp::RedOpType;

// How all_reduce moves data (see chooseAllreduce).
enum class Algorithm { kOneShot, kRing };
Algorithm chooseAllreduce(size_t bytes, int world);
const char* algorithmName(Algorithm algorithm);

// dst[i] = dst[i] (op) src[i] for n elements. AVG sums (the caller divides).
void reduceInto(void* dst, const void* src, int64_t n, c10::ScalarType dtype,
                RedOp op);
// dst[i] /= divisor (AVG's last step; floating and complex types only).
void divideBy(void* dst, int64_t n, c10::ScalarType dtype, int64_t divisor);

// In place on `data` (numel elements), on every rank.
void allReduce(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
               RedOp op, Algorithm algorithm);
// root's `bytes` to every rank.
void broadcast(Session& s, char* data, size_t bytes, int root);
// The reduction lands in root's `data`; other ranks' data is left as it was.
void reduce(Session& s, char* data, int64_t numel, c10::ScalarType dtype,
            RedOp op, int root);
// The pairwise collectives' data movement (the descriptors agreed on say
// how much each rank sends each other: descriptorOf(p).sends[q]).
// Each rank's `bytes` of `input` into outputs[rank] of the ranks that
// receive: every rank for all_gather, the root for gather (the others pass
// no outputs). Sizes may differ between ranks.
void allGather(Session& s, const char* input, size_t bytes,
               const std::vector<char*>& outputs);
// The root's inputs[q] (root only) into rank q's `output`.
void scatter(Session& s, const std::vector<const char*>& inputs, char* output,
             int root);
// Rank r gets the reduction of block r (numel elements) of every rank's
// input (world blocks).
void reduceScatter(Session& s, const char* input, char* output, int64_t numel,
                   c10::ScalarType dtype, RedOp op);
// reduce_scatter's list form: block q of every rank (its inputs[q], as many
// elements as rank q's output, which may differ by rank) reduces into rank
// q's `output`.
void reduceScatterBlocks(Session& s, const std::vector<const char*>& inputs,
                         char* output, c10::ScalarType dtype, RedOp op);
// inputs[q] goes to rank q, into its outputs[rank].
void allToAll(Session& s, const std::vector<const char*>& inputs,
              const std::vector<char*>& outputs);
// Point to point. Messages match by tag: between a pair of ranks, those of
// one tag arrive in order, and a receive takes the first of its tag. A
// message that comes before its receive waits in the receiver's Mailbox
// (what MPI calls an unexpected message); the receiver checks that sizes
// and types match.
class Mailbox {
 public:
  struct Message {
    int32_t dtype;
    std::vector<char> data;
  };
  std::optional<Message> take(int from, int tag);
  void put(int from, int tag, Message message);

 private:
  std::mutex mutex_; // the kernels of one stream run in order; for safety
  std::map<std::pair<int, int>, std::deque<Message>> waiting_;
};
void send(Session& s, int to, int tag, const char* data, size_t bytes,
          c10::ScalarType dtype);
void recv(Session& s, Mailbox& mailbox, int from, int tag, char* data,
          size_t bytes, c10::ScalarType dtype);
// The first message of `tag` from any rank; returns that rank.
int recvAny(Session& s, Mailbox& mailbox, int tag, char* data, size_t bytes,
            c10::ScalarType dtype);

} // namespace ember::eccl
// ember-book: end eccl_collectives_api
