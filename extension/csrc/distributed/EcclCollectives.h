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
// Each rank's `bytes` of `input` into outputs[rank] of every rank.
void allGather(Session& s, const char* input, size_t bytes,
               const std::vector<char*>& outputs);
// Rank r gets the reduction of block r (numel elements) of every rank's
// input (world blocks).
void reduceScatter(Session& s, const char* input, char* output, int64_t numel,
                   c10::ScalarType dtype, RedOp op);
// Rank r's input holds, in rank order, descriptorOf(r).sends[q] bytes for
// each rank q; each rank's output gets, in rank order, what each rank sent it.
void allToAll(Session& s, const char* input, char* output, size_t output_bytes);
// Point to point, in order per pair of ranks; the receiver checks that the
// sizes and types match.
void send(Session& s, int to, const char* data, size_t bytes,
          c10::ScalarType dtype);
void recv(Session& s, int from, char* data, size_t bytes,
          c10::ScalarType dtype);

} // namespace ember::eccl
// ember-book: end eccl_collectives_api
