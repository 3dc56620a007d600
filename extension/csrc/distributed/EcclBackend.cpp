#include "distributed/EcclBackend.h"

#include "aten/EmberAsyncLaunch.h"
#include "aten/EmberLaunch.h"
#include "distributed/EcclCollectives.h"

// ember-book: begin eccl_backend_checks
#include <ATen/core/jit_type.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>
#include <c10/util/irange.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>
#include <utility>

namespace ember::eccl {
namespace {

constexpr auto kEmber = c10::DeviceType::PrivateUse1;

const c10::impl::DeviceGuardImplInterface& guardImpl() {
  return *c10::impl::getDeviceGuardImpl(kEmber);
}

const char* reduceName(RedOp op) {
  switch (op) {
    case RedOp::SUM: return "SUM";
    case RedOp::AVG: return "AVG";
    case RedOp::PRODUCT: return "PRODUCT";
    case RedOp::MIN: return "MIN";
    case RedOp::MAX: return "MAX";
    case RedOp::BAND: return "BAND";
    case RedOp::BOR: return "BOR";
    case RedOp::BXOR: return "BXOR";
    case RedOp::PREMUL_SUM: return "PREMUL_SUM";
    default: return "UNUSED";
  }
}

// The reductions eccl's kernels have, for this dtype.
void checkReduction(const std::string& name, c10d::ReduceOp op,
                    c10::ScalarType dtype) {
  const RedOp kind = op.op_;
  const bool known = kind == RedOp::SUM || kind == RedOp::AVG ||
      kind == RedOp::PRODUCT || kind == RedOp::MIN || kind == RedOp::MAX;
  TORCH_CHECK(known, "eccl: ", name, " does not support ReduceOp.",
              reduceName(kind), " (eccl has SUM, AVG, PRODUCT, MIN, MAX)");
  TORCH_CHECK(kind != RedOp::AVG || c10::isFloatingType(dtype) ||
                  c10::isComplexType(dtype),
              "eccl: ", name, " with ReduceOp.AVG needs a floating or complex "
              "dtype, got ", dtype);
  TORCH_CHECK(!c10::isComplexType(dtype) ||
                  (kind != RedOp::MIN && kind != RedOp::MAX),
              "eccl: ", name, " cannot take the ", reduceName(kind), " of ",
              dtype, " (complex numbers have no order)");
}

void checkSameDtype(const char* name, const at::Tensor& mine,
                    const at::Tensor& other) {
  TORCH_CHECK(other.scalar_type() == mine.scalar_type(), "eccl: ", name,
              " takes tensors of one dtype, got ", mine.scalar_type(),
              " and ", other.scalar_type());
}

int checkRoot(const char* name, int64_t root, int world) {
  TORCH_CHECK(root >= 0 && root < world, "eccl: ", name, " from root ", root,
              " in a group of ", world, " ranks");
  return static_cast<int>(root);
}

// Rows (dim 0) per rank of an all_to_all_single's tensor, as c10d checks
// them (in its words), then in bytes.
std::vector<int64_t> splitBytes(const std::vector<int64_t>& splits,
                                const at::Tensor& t, int world,
                                const char* which) {
  const int64_t rows = t.dim() > 0 ? t.size(0) : 1;
  std::vector<int64_t> counts(world, 0);
  if (splits.empty()) {
    TORCH_CHECK(rows % world == 0, "Tensor's dim 0 does not divide equally "
                "across group size (eccl: all_to_all_single's ", which,
                " has ", rows, " rows for ", world, " ranks)");
    std::fill(counts.begin(), counts.end(), rows / world);
  } else {
    TORCH_CHECK(static_cast<int>(splits.size()) == world,
                "Number of tensor splits not equal to group size (eccl: "
                "all_to_all_single got ", splits.size(), " ", which,
                " split sizes for ", world, " ranks)");
    int64_t sum = 0;
    for (const int64_t n : splits) {
      TORCH_CHECK(n >= 0, "eccl: all_to_all_single's ", which,
                  " split sizes must not be negative, got ", n);
      sum += n;
    }
    TORCH_CHECK(sum == rows, "Split sizes doesn't match total dim 0 size "
                "(eccl: all_to_all_single's ", which, " split sizes sum to ",
                sum, ", its dim 0 is ", rows, ")");
    counts = splits;
  }
  const int64_t row_bytes = rows > 0 ? t.nbytes() / rows : 0;
  for (int64_t& n : counts) n *= row_bytes;
  return counts;
}

// The kernel's view of host pointers (ember::atOffset, each).
template <typename Pointer>
std::vector<Pointer> shifted(const std::vector<Pointer>& pointers,
                             ptrdiff_t offset) {
  std::vector<Pointer> at;
  at.reserve(pointers.size());
  for (Pointer p : pointers) at.push_back(ember::atOffset(p, offset));
  return at;
}

// A unique name for the group's link in /dev/shm.
std::string newLinkName() {
  static std::atomic<int> groups{0};
  std::random_device random;
  return c10::str("/ember-eccl-", ::getpid(), "-", groups++, "-", random());
}

} // namespace
} // namespace ember::eccl
// ember-book: end eccl_backend_checks

// ember-book: begin eccl_work
namespace ember::eccl {

void Outcome::fail(std::string message) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!error_) {
    error_ = std::make_exception_ptr(c10::Error(std::move(message)));
  }
}

std::exception_ptr Outcome::error() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

EcclWork::EcclWork(int rank, c10d::OpType type, uint64_t seq,
                   c10::Stream comm, std::shared_ptr<Outcome> outcome,
                   std::vector<at::Tensor> outputs, bool host_waits)
    : c10d::Work(rank, type),
      seq_(seq),
      comm_(comm),
      outcome_(std::move(outcome)),
      outputs_(std::move(outputs)),
      host_waits_(host_waits) {
  done_.record(comm_);
  // The future completes in stream order too: markCompleted records an event
  // on the current stream, made the communication stream here, and whoever
  // waits on the future makes their stream wait for it (as NCCL's does).
  future_ = c10::make_intrusive<c10::ivalue::Future>(
      c10::ListType::create(c10::TensorType::get()),
      std::vector<c10::Device>{comm_.device()});
  c10::StreamGuard on_comm(comm_);
  future_->markCompleted(c10::IValue(outputs_));
}

void EcclWork::rethrowIfFailed() const {
  if (auto error = outcome_->error()) std::rethrow_exception(error);
}

bool EcclWork::isCompleted() {
  return done_.query();
}

bool EcclWork::isSuccess() const {
  return done_.query() && !outcome_->error();
}

std::exception_ptr EcclWork::exception() const {
  return outcome_->error();
}

// A failure is not raised here, even if already known: like a failed CUDA
// kernel's, it surfaces at the caller's next synchronization of the stream
// that waited, the same place whether the peer failed early or late.
bool EcclWork::wait(std::chrono::milliseconds /*timeout: the kernel's*/) {
  done_.block(guardImpl().getStream(comm_.device()));
  if (host_waits_) synchronize();
  return true;
}

void EcclWork::synchronize() {
  try {
    done_.synchronize();
  } catch (const c10::Error&) {
    rethrowIfFailed(); // the collective's own message, if it has one
    throw;
  }
  rethrowIfFailed();
}

std::vector<at::Tensor> EcclWork::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> EcclWork::getFuture() {
  return future_;
}

int EcclWork::sourceRank() const {
  if (!source_) return c10d::Work::sourceRank(); // c10d's refusal
  // Known once the kernel ran.
  try {
    done_.synchronize();
  } catch (const c10::Error&) {
    rethrowIfFailed();
    throw;
  }
  rethrowIfFailed();
  return source_->load();
}

uint64_t EcclWork::getSequencenumber() const {
  return seq_;
}
} // namespace ember::eccl
// ember-book: end eccl_work

// ember-book: begin eccl_backend_group
namespace ember::eccl {

EcclBackend::EcclBackend(const c10::intrusive_ptr<c10d::Store>& store,
                         int rank, int size,
                         std::chrono::milliseconds timeout)
    : c10d::Backend(rank, size),
      timeout_(timeout),
      failed_(std::make_shared<Outcome>()) {
  TORCH_CHECK(size >= 1 && size <= kMaxRanks, "eccl: a group of ", size,
              " ranks; the shared-memory link joins at most ", kMaxRanks);
  // Rank 0 makes the link and names it in the store; the others open it by
  // that name; the last to open removes the name. From then on nothing in
  // /dev/shm holds the link, however the processes end: the memory goes with
  // the last mapping. A rank killed before all have opened leaves the name
  // behind, unless a rank that opened it closes its group (closeLink).
  const size_t bytes = linkBytes(size);
  if (rank == 0) {
    link_name_ = newLinkName();
    EMBER_CHECK(emLinkOpen(link_name_.c_str(), bytes, 1, &link_));
    store->set("eccl_link", link_name_);
  } else {
    const std::vector<uint8_t> name = store->get("eccl_link");
    link_name_.assign(name.begin(), name.end());
    EMBER_CHECK(emLinkOpen(link_name_.c_str(), bytes, 0, &link_));
  }
  if (store->add("eccl_opened", 1) == size) {
    EMBER_CHECK(emLinkUnlink(link_name_.c_str()));
    link_named_ = false;
    store->deleteKey("eccl_link");
    store->deleteKey("eccl_opened");
  }
  // Peers watch this rank's process while they wait for it.
  const int pid = ::getpid();
  ember::launch({link_}, [&](ptrdiff_t offset) {
    auto* header = reinterpret_cast<LinkHeader*>(
        ember::atOffset(static_cast<char*>(link_), offset));
    header->ranks[rank].pid.store(pid, std::memory_order_release);
  });
}

EcclBackend::~EcclBackend() {
  try {
    closeLink();
  } catch (...) {
    // A failed group's stream reports its failure again: nothing to add.
  }
}

void EcclBackend::shutdown() {
  closeLink();
}

c10::intrusive_ptr<c10d::Backend::Options> EcclBackend::getBackendOptions() {
  return c10::make_intrusive<c10d::Backend::Options>("eccl", timeout_);
}

// Every rank of the parent calls split with the ranks of its own subgroup (a
// rank in none gets the first, and no backend); `store` is the subgroup's,
// so its members meet there and make their link as any group does.
c10::intrusive_ptr<c10d::Backend> EcclBackend::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<c10d::Backend::Options>& opts) {
  const auto mine = std::find(ranks.begin(), ranks.end(), getRank());
  if (mine == ranks.end()) return nullptr;
  for (const int rank : ranks) {
    TORCH_CHECK(rank >= 0 && rank < getSize(), "eccl: split_group: rank ", rank,
                " is not in the parent group of ", getSize(), " ranks");
  }
  auto child = c10::make_intrusive<EcclBackend>(
      store, static_cast<int>(mine - ranks.begin()),
      static_cast<int>(ranks.size()), opts ? opts->timeout : timeout_);
  if (opts) child->setGroupUid(opts->group_name);
  return child;
}

void EcclBackend::closeLink() {
  if (link_ == nullptr) return;
  void* link = std::exchange(link_, nullptr);
  if (link_named_) emLinkUnlink(link_name_.c_str()); // a peer never came
  // Queued collectives still use the link.
  for (const auto& stream : {sends_, comm_}) {
    if (stream) emStreamSynchronize(stream->device_index(), stream->id());
  }
  EMBER_CHECK(emLinkClose(link));
}
} // namespace ember::eccl
// ember-book: end eccl_backend_group

// ember-book: begin eccl_backend_run
namespace ember::eccl {

std::chrono::milliseconds EcclBackend::timeoutOr(
    std::chrono::milliseconds timeout) const {
  return timeout == c10d::kUnsetTimeout ? timeout_ : timeout;
}

c10::Device EcclBackend::deviceFor(const std::vector<at::Tensor>& tensors,
                                   const std::string& name) {
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.device().type() == kEmber, "eccl: ", name,
                " takes ember tensors, got one on ", t.device(),
                " (for CPU tensors, name a CPU backend too: "
                "init_process_group(\"cpu:gloo,ember:eccl\"))");
    TORCH_CHECK(t.is_contiguous(), "eccl: ", name,
                " takes contiguous tensors (call .contiguous() first)");
    if (!device_) device_ = t.device();
    TORCH_CHECK(t.device() == *device_, "eccl: ", name, " got a tensor on ",
                t.device(), ", but this rank's group runs on ", *device_,
                " (a group has one device per rank)");
  }
  if (!device_) device_ = c10::Device(kEmber, guardImpl().getDevice().index());
  return *device_;
}

Descriptor EcclBackend::describe(const std::string& name, c10d::OpType type,
                                 const at::Tensor& tensor, int64_t numel) {
  Descriptor d; // its seq is given when it runs (run)
  d.op = static_cast<int32_t>(type);
  std::snprintf(d.name, sizeof(d.name), "%s", name.c_str());
  d.dtype = static_cast<int32_t>(tensor.defined() ? tensor.scalar_type()
                                                  : c10::kByte);
  d.numel = numel;
  d.world = getSize();
  return d;
}

c10::intrusive_ptr<c10d::Work> EcclBackend::run(Call call) {
  if (auto error = failed_->error()) {
    // Whatever was stored, the caller gets a c10::Error naming eccl and the
    // call, and the cause without its C++ backtrace.
    std::string cause = "an exception that is not a std::exception";
    try {
      std::rethrow_exception(error);
    } catch (const c10::Error& e) {
      cause = e.what_without_backtrace();
    } catch (const std::exception& e) {
      cause = e.what();
    } catch (...) {
    }
    TORCH_CHECK(false, "eccl: ", call.name, ": the group failed earlier (",
                cause, ")");
  }
  TORCH_CHECK(link_ != nullptr, "eccl: ", call.name, " after shutdown()");
  const c10::Device device = deviceFor(call.tensors, call.name);
  c10::DeviceGuard on_device(device);
  const c10::Stream stream = streamFor(call.type, device);
  // The inputs are ready when the caller's stream gets here.
  c10::Event ready(kEmber);
  ready.record(guardImpl().getStream(device));
  ready.block(stream);
  // Tensors in flight: their memory is not reused before the collective ends.
  std::vector<const void*> buffers{link_};
  for (const at::Tensor& t : call.tensors) {
    guardImpl().recordDataPtrOnStream(t.storage().data_ptr(), stream);
    buffers.push_back(t.data_ptr());
  }
  // Numbered only once every check passed: a call refused on one rank must
  // not shift the numbering of the next.
  if (call.descriptor) call.descriptor->seq = ++seq_;
  const uint64_t seq = seq_;
  const std::string what = call.descriptor
      ? c10::str("eccl: ", call.name, " #", seq, " (", getSize(), " ranks)")
      : c10::str("eccl: ", call.name);
  auto outcome = std::make_shared<Outcome>();
  // The profiler's name for the kernel; the driver takes it at the launch.
  const std::string kernel_name = c10::str("eccl_", call.name);
  emSetNextLaunchName(kernel_name.c_str());
  ember::launchAsync(
      device.index(), stream.id(), buffers,
      [link = static_cast<char*>(link_), rank = getRank(), world = getSize(),
       timeout = timeoutOr(call.timeout), what, outcome, group = failed_,
       descriptor = call.descriptor,
       body = std::move(call.body)](ptrdiff_t offset) {
        Session session(ember::atOffset(link, offset), rank, world, timeout,
                        what);
        try {
          if (descriptor) session.agree(*descriptor);
          body(session, offset);
        } catch (const c10::Error& e) {
          const std::string message = e.what_without_backtrace();
          session.abort(message); // the peers must not wait for this rank
          outcome->fail(message);
          group->fail(message);
          throw;
        }
      });
  auto work = c10::make_intrusive<EcclWork>(getRank(), call.type, seq, stream,
                                            outcome, call.outputs,
                                            call.host_waits);
  // The next sends of this coalescing start after this collective.
  if (coalescing_ && stream == *comm_ && call.type != c10d::OpType::RECV &&
      call.type != c10d::OpType::RECVANYSOURCE) {
    fence_ = std::make_unique<c10::Event>(kEmber);
    fence_->record(*comm_);
  }
  if (coalescing_) {
    coalesced_.insert(coalesced_.end(), call.outputs.begin(),
                      call.outputs.end());
    coalesced_outcome_ = outcome;
  }
  return work;
}
} // namespace ember::eccl
// ember-book: end eccl_backend_run

// ember-book: begin eccl_backend_streams
namespace ember::eccl {

c10::Stream EcclBackend::streamFor(c10d::OpType type, c10::Device device) {
  auto create = [&] {
    emStream_t id = 0;
    EMBER_CHECK(emStreamCreate(device.index(), &id));
    return c10::Stream(c10::Stream::UNSAFE, device, id);
  };
  if (!comm_) comm_ = create();
  if (coalescing_ && type == c10d::OpType::SEND) {
    // A coalesced send (batch_isend_irecv) runs on a stream of its own, so
    // that this rank's receives of the batch progress while it waits for
    // room at its peer: two ranks that both send first, more than the
    // channel holds, would otherwise wait for each other for good. It starts
    // after what came before the batch (the channels are shared with the
    // ring); the communication stream waits for it before anything else.
    if (!sends_) sends_ = create();
    if (fence_) {
      fence_->block(*sends_);
      fence_.reset();
    }
    sends_pending_ = true;
    return *sends_;
  }
  // The batch's receives do not wait for its sends; anything else does.
  const bool receives = type == c10d::OpType::RECV ||
      type == c10d::OpType::RECVANYSOURCE;
  if (!(coalescing_ && receives)) joinSends();
  return *comm_;
}

void EcclBackend::joinSends() {
  if (!sends_pending_) return;
  c10::Event sent(kEmber);
  sent.record(*sends_);
  sent.block(*comm_);
  sends_pending_ = false;
}

void EcclBackend::startCoalescing() {
  coalescing_ = true;
  coalesced_.clear();
  coalesced_outcome_ = std::make_shared<Outcome>();
  // Sends of the batch start after what the communication stream holds now,
  // not after the batch's own receives.
  fence_.reset();
  if (comm_) {
    fence_ = std::make_unique<c10::Event>(kEmber);
    fence_->record(*comm_);
  }
}

// The calls in between ran one by one, in order on the communication stream;
// their work is one work: done when the last is.
c10::intrusive_ptr<c10d::Work> EcclBackend::endCoalescing() {
  TORCH_CHECK(coalescing_, "eccl: endCoalescing without startCoalescing");
  coalescing_ = false;
  fence_.reset();
  if (!comm_) return nullptr; // nothing was issued
  c10::DeviceGuard on_device(comm_->device());
  joinSends();
  return c10::make_intrusive<EcclWork>(getRank(), c10d::OpType::COALESCED,
                                       seq_, *comm_, coalesced_outcome_,
                                       std::move(coalesced_), false);
}

c10::intrusive_ptr<c10d::Work> EcclBackend::coalesced(
    const std::function<void()>& issue) {
  if (coalescing_) {
    // Joins the caller's coalescing; what it returns for now covers the calls
    // so far (the caller's endCoalescing makes the work of them all).
    issue();
    if (!comm_) return nullptr;
    c10::DeviceGuard on_device(comm_->device());
    return c10::make_intrusive<EcclWork>(getRank(), c10d::OpType::COALESCED,
                                         seq_, *comm_, coalesced_outcome_,
                                         coalesced_, false);
  }
  startCoalescing();
  try {
    issue();
  } catch (...) {
    coalescing_ = false; // a refused call must not leave the group coalescing
    throw;
  }
  return endCoalescing();
}
} // namespace ember::eccl
// ember-book: end eccl_backend_streams

// ember-book: begin eccl_backend_reductions
namespace ember::eccl {

c10::intrusive_ptr<c10d::Work> EcclBackend::allreduce(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "eccl: all_reduce takes one tensor");
  at::Tensor t = tensors[0];
  checkReduction("all_reduce", opts.reduceOp, t.scalar_type());
  const Algorithm algorithm = chooseAllreduce(t.nbytes(), getSize());
  Descriptor d = describe("all_reduce", c10d::OpType::ALLREDUCE, t, t.numel());
  d.reduce = static_cast<int32_t>(opts.reduceOp.op_);
  auto* data = static_cast<char*>(t.data_ptr());
  return run({c10d::OpType::ALLREDUCE, "all_reduce", {t}, {t}, opts.timeout, d,
              [data, numel = t.numel(), dtype = t.scalar_type(),
               op = opts.reduceOp.op_, algorithm](Session& s, ptrdiff_t off) {
                allReduce(s, ember::atOffset(data, off), numel, dtype, op,
                          algorithm);
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::broadcast(
    std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "eccl: broadcast takes one tensor");
  at::Tensor t = tensors[0];
  Descriptor d = describe("broadcast", c10d::OpType::BROADCAST, t, t.numel());
  d.root = opts.rootRank;
  auto* data = static_cast<char*>(t.data_ptr());
  return run({c10d::OpType::BROADCAST, "broadcast", {t}, {t}, opts.timeout, d,
              [data, bytes = t.nbytes(), root = static_cast<int>(opts.rootRank)](
                  Session& s, ptrdiff_t off) {
                eccl::broadcast(s, ember::atOffset(data, off), bytes, root);
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::reduce(
    std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "eccl: reduce takes one tensor");
  at::Tensor t = tensors[0];
  checkReduction("reduce", opts.reduceOp, t.scalar_type());
  Descriptor d = describe("reduce", c10d::OpType::REDUCE, t, t.numel());
  d.root = opts.rootRank;
  d.reduce = static_cast<int32_t>(opts.reduceOp.op_);
  auto* data = static_cast<char*>(t.data_ptr());
  return run({c10d::OpType::REDUCE, "reduce", {t}, {t}, opts.timeout, d,
              [data, numel = t.numel(), dtype = t.scalar_type(),
               op = opts.reduceOp.op_, root = static_cast<int>(opts.rootRank)](
                  Session& s, ptrdiff_t off) {
                eccl::reduce(s, ember::atOffset(data, off), numel, dtype, op,
                             root);
              }});
}
} // namespace ember::eccl
// ember-book: end eccl_backend_reductions

// ember-book: begin eccl_backend_gathers
namespace ember::eccl {

c10::intrusive_ptr<c10d::Work> EcclBackend::allgather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1 && outputs.size() == 1,
              "eccl: all_gather takes one input tensor and one output list");
  at::Tensor input = inputs[0];
  const std::vector<at::Tensor>& list = outputs[0];
  TORCH_CHECK(static_cast<int>(list.size()) == getSize(), "eccl: all_gather ",
              "needs an output tensor for each of the ", getSize(),
              " ranks, got ", list.size());
  // Sizes may differ by rank (as NCCL allows): outputs[q] must hold what
  // rank q sends, which the ranks check together (Session::checkPairs).
  Descriptor d = describe("all_gather", c10d::OpType::ALLGATHER, input, -1);
  std::vector<at::Tensor> touched{input};
  std::vector<char*> targets;
  for (const int q : c10::irange(getSize())) {
    const at::Tensor& out = list[q];
    checkSameDtype("all_gather", input, out);
    touched.push_back(out);
    targets.push_back(static_cast<char*>(out.data_ptr()));
    d.sends[q] = static_cast<int64_t>(input.nbytes());
    d.recvs[q] = static_cast<int64_t>(out.nbytes());
  }
  return run({c10d::OpType::ALLGATHER, "all_gather", touched, list,
              opts.timeout, d,
              [in = static_cast<const char*>(input.data_ptr()),
               bytes = input.nbytes(), targets](Session& s, ptrdiff_t off) {
                allGather(s, ember::atOffset(in, off), bytes,
                          shifted(targets, off));
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::gather(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) {
  TORCH_CHECK(inputs.size() == 1, "eccl: gather takes one input tensor");
  const int root = checkRoot("gather", opts.rootRank, getSize());
  at::Tensor input = inputs[0];
  const bool receives = getRank() == root;
  // c10d passes the root its output list, the others an empty one.
  const std::vector<at::Tensor> list =
      receives && !outputs.empty() ? outputs[0] : std::vector<at::Tensor>{};
  TORCH_CHECK(!receives || static_cast<int>(list.size()) == getSize(),
              "eccl: gather needs, on the root, an output tensor for each of "
              "the ", getSize(), " ranks, got ", list.size());
  Descriptor d = describe("gather", c10d::OpType::GATHER, input, -1);
  d.root = root;
  d.sends[root] = static_cast<int64_t>(input.nbytes());
  std::vector<at::Tensor> touched{input};
  std::vector<char*> targets;
  for (const int q : c10::irange(static_cast<int>(list.size()))) {
    checkSameDtype("gather", input, list[q]);
    touched.push_back(list[q]);
    targets.push_back(static_cast<char*>(list[q].data_ptr()));
    d.recvs[q] = static_cast<int64_t>(list[q].nbytes());
  }
  return run({c10d::OpType::GATHER, "gather", touched, list, opts.timeout, d,
              [in = static_cast<const char*>(input.data_ptr()),
               bytes = input.nbytes(), targets](Session& s, ptrdiff_t off) {
                allGather(s, ember::atOffset(in, off), bytes,
                          shifted(targets, off));
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1, "eccl: scatter takes one output tensor");
  const int root = checkRoot("scatter", opts.rootRank, getSize());
  at::Tensor output = outputs[0];
  const bool sends = getRank() == root;
  // c10d passes the root its input list, the others an empty one.
  const std::vector<at::Tensor> list =
      sends && !inputs.empty() ? inputs[0] : std::vector<at::Tensor>{};
  TORCH_CHECK(!sends || static_cast<int>(list.size()) == getSize(),
              "eccl: scatter needs, on the root, an input tensor for each of "
              "the ", getSize(), " ranks, got ", list.size());
  Descriptor d = describe("scatter", c10d::OpType::SCATTER, output, -1);
  d.root = root;
  d.recvs[root] = static_cast<int64_t>(output.nbytes());
  std::vector<at::Tensor> touched{output};
  std::vector<const char*> sources;
  for (const int q : c10::irange(static_cast<int>(list.size()))) {
    checkSameDtype("scatter", output, list[q]);
    touched.push_back(list[q]);
    sources.push_back(static_cast<const char*>(list[q].data_ptr()));
    d.sends[q] = static_cast<int64_t>(list[q].nbytes());
  }
  return run({c10d::OpType::SCATTER, "scatter", touched, {output},
              opts.timeout, d,
              [sources, out = static_cast<char*>(output.data_ptr()),
               root](Session& s, ptrdiff_t off) {
                eccl::scatter(s, shifted(sources, off),
                              ember::atOffset(out, off), root);
              }});
}
} // namespace ember::eccl
// ember-book: end eccl_backend_gathers

// ember-book: begin eccl_backend_reduce_scatter
namespace ember::eccl {

c10::intrusive_ptr<c10d::Work> EcclBackend::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input,
    const c10d::ReduceScatterOptions& opts) {
  checkReduction("reduce_scatter", opts.reduceOp, input.scalar_type());
  TORCH_CHECK(input.numel() == output.numel() * getSize() &&
                  output.scalar_type() == input.scalar_type(),
              "eccl: reduce_scatter_tensor needs an input of ", getSize(),
              " x ", output.numel(), " ", output.scalar_type(),
              " elements, got ", input.numel(), " ", input.scalar_type());
  Descriptor d = describe("reduce_scatter", c10d::OpType::REDUCE_SCATTER,
                          output, output.numel());
  d.reduce = static_cast<int32_t>(opts.reduceOp.op_);
  return run({c10d::OpType::REDUCE_SCATTER, "reduce_scatter", {input, output},
              {output}, opts.timeout, d,
              [in = static_cast<const char*>(input.data_ptr()),
               out = static_cast<char*>(output.data_ptr()),
               numel = output.numel(), dtype = output.scalar_type(),
               op = opts.reduceOp.op_](Session& s, ptrdiff_t off) {
                reduceScatter(s, ember::atOffset(in, off),
                              ember::atOffset(out, off), numel, dtype, op);
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::reduce_scatter(
    std::vector<at::Tensor>& outputs,
    std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == 1 && inputs.size() == 1,
              "eccl: reduce_scatter takes one output and one input list");
  const std::vector<at::Tensor>& list = inputs[0];
  TORCH_CHECK(static_cast<int>(list.size()) == getSize(),
              "eccl: reduce_scatter needs an input for each of the ",
              getSize(), " ranks, got ", list.size());
  at::Tensor output = outputs[0];
  checkReduction("reduce_scatter", opts.reduceOp, output.scalar_type());
  // Outputs may differ by rank (as NCCL allows): every rank's inputs[q]
  // must be as long as rank q's output (Session::checkPairs).
  Descriptor d =
      describe("reduce_scatter", c10d::OpType::REDUCE_SCATTER, output, -1);
  d.reduce = static_cast<int32_t>(opts.reduceOp.op_);
  std::vector<at::Tensor> touched{output};
  std::vector<const char*> sources;
  for (const int q : c10::irange(getSize())) {
    checkSameDtype("reduce_scatter", output, list[q]);
    touched.push_back(list[q]);
    sources.push_back(static_cast<const char*>(list[q].data_ptr()));
    d.sends[q] = static_cast<int64_t>(list[q].nbytes());
    d.recvs[q] = static_cast<int64_t>(output.nbytes());
  }
  return run({c10d::OpType::REDUCE_SCATTER, "reduce_scatter", touched,
              {output}, opts.timeout, d,
              [sources, out = static_cast<char*>(output.data_ptr()),
               dtype = output.scalar_type(),
               op = opts.reduceOp.op_](Session& s, ptrdiff_t off) {
                reduceScatterBlocks(s, shifted(sources, off),
                                    ember::atOffset(out, off), dtype, op);
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::alltoall_base(
    at::Tensor& output, at::Tensor& input,
    std::vector<int64_t>& output_split_sizes,
    std::vector<int64_t>& input_split_sizes,
    const c10d::AllToAllOptions& opts) {
  const int world = getSize();
  checkSameDtype("all_to_all_single", input, output);
  // Splits count rows (dim 0); none given: equal blocks. The output's
  // splits are checked against what the senders send (Session::checkPairs):
  // a rank expecting other sizes fails every rank, never lays data out
  // where its caller does not look.
  const std::vector<int64_t> sends =
      splitBytes(input_split_sizes, input, world, "input");
  const std::vector<int64_t> recvs =
      splitBytes(output_split_sizes, output, world, "output");
  Descriptor d =
      describe("all_to_all_single", c10d::OpType::ALLTOALL_BASE, input, -1);
  std::vector<const char*> sources;
  std::vector<char*> targets;
  const auto* in = static_cast<const char*>(input.data_ptr());
  auto* out = static_cast<char*>(output.data_ptr());
  for (const int q : c10::irange(world)) {
    d.sends[q] = sends[q];
    d.recvs[q] = recvs[q];
    sources.push_back(in);
    targets.push_back(out);
    in += sends[q];
    out += recvs[q];
  }
  return run({c10d::OpType::ALLTOALL_BASE, "all_to_all_single",
              {input, output}, {output}, opts.timeout, d,
              [sources, targets](Session& s, ptrdiff_t off) {
                allToAll(s, shifted(sources, off), shifted(targets, off));
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllToAllOptions& opts) {
  const int world = getSize();
  TORCH_CHECK(static_cast<int>(inputs.size()) == world &&
                  static_cast<int>(outputs.size()) == world,
              "eccl: all_to_all needs an input and an output tensor for each "
              "of the ", world, " ranks, got ", inputs.size(), " and ",
              outputs.size());
  // Sizes may differ by pair of ranks (as NCCL allows): outputs[q] must hold
  // what rank q sends (Session::checkPairs).
  Descriptor d = describe("all_to_all", c10d::OpType::ALLTOALL, inputs[0], -1);
  std::vector<at::Tensor> touched;
  std::vector<const char*> sources;
  std::vector<char*> targets;
  for (const int q : c10::irange(world)) {
    checkSameDtype("all_to_all", inputs[0], inputs[q]);
    checkSameDtype("all_to_all", inputs[0], outputs[q]);
    touched.push_back(inputs[q]);
    touched.push_back(outputs[q]);
    sources.push_back(static_cast<const char*>(inputs[q].data_ptr()));
    targets.push_back(static_cast<char*>(outputs[q].data_ptr()));
    d.sends[q] = static_cast<int64_t>(inputs[q].nbytes());
    d.recvs[q] = static_cast<int64_t>(outputs[q].nbytes());
  }
  return run({c10d::OpType::ALLTOALL, "all_to_all", touched, outputs,
              opts.timeout, d,
              [sources, targets](Session& s, ptrdiff_t off) {
                allToAll(s, shifted(sources, off), shifted(targets, off));
              }});
}
} // namespace ember::eccl
// ember-book: end eccl_backend_reduce_scatter

// ember-book: begin eccl_backend_point_to_point
namespace ember::eccl {

c10::intrusive_ptr<c10d::Work> EcclBackend::barrier(
    const c10d::BarrierOptions& opts) {
  Descriptor d = describe("barrier", c10d::OpType::BARRIER, at::Tensor(), 0);
  Call call{c10d::OpType::BARRIER, "barrier", {}, {}, opts.timeout, d,
            [](Session&, ptrdiff_t) {}};
  call.host_waits = true; // a barrier is for the host
  return run(std::move(call));
}

c10::intrusive_ptr<c10d::Work> EcclBackend::send(
    std::vector<at::Tensor>& tensors, int dst_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "eccl: send takes one tensor");
  TORCH_CHECK(dst_rank >= 0 && dst_rank < getSize() && dst_rank != getRank(),
              "eccl: send to rank ", dst_rank, " from rank ", getRank(),
              " of ", getSize());
  at::Tensor t = tensors[0];
  return run({c10d::OpType::SEND, c10::str("send to rank ", dst_rank), {t},
              {t}, c10d::kUnsetTimeout, std::nullopt,
              [data = static_cast<const char*>(t.data_ptr()), dst_rank, tag,
               bytes = t.nbytes(), dtype = t.scalar_type()](Session& s,
                                                           ptrdiff_t off) {
                eccl::send(s, dst_rank, tag, ember::atOffset(data, off), bytes,
                           dtype);
              }});
}

c10::intrusive_ptr<c10d::Work> EcclBackend::recv(
    std::vector<at::Tensor>& tensors, int src_rank, int tag) {
  TORCH_CHECK(tensors.size() == 1, "eccl: recv takes one tensor");
  TORCH_CHECK(src_rank >= 0 && src_rank < getSize() && src_rank != getRank(),
              "eccl: recv from rank ", src_rank, " on rank ", getRank(),
              " of ", getSize());
  at::Tensor t = tensors[0];
  return run({c10d::OpType::RECV, c10::str("recv from rank ", src_rank), {t},
              {t}, c10d::kUnsetTimeout, std::nullopt,
              [data = static_cast<char*>(t.data_ptr()), src_rank, tag,
               mailbox = mailbox_, bytes = t.nbytes(),
               dtype = t.scalar_type()](Session& s, ptrdiff_t off) {
                eccl::recv(s, *mailbox, src_rank, tag,
                           ember::atOffset(data, off), bytes, dtype);
              }});
}

// dist.recv without src: the kernel watches every channel, and the work
// learns the sender only when the kernel ran (sourceRank waits for it).
c10::intrusive_ptr<c10d::Work> EcclBackend::recvAnysource(
    std::vector<at::Tensor>& tensors, int tag) {
  TORCH_CHECK(tensors.size() == 1, "eccl: recv takes one tensor");
  at::Tensor t = tensors[0];
  auto source = std::make_shared<std::atomic<int>>(-1);
  auto work = run({c10d::OpType::RECVANYSOURCE, "recv from any rank", {t},
                   {t}, c10d::kUnsetTimeout, std::nullopt,
                   [data = static_cast<char*>(t.data_ptr()), tag, source,
                    mailbox = mailbox_, bytes = t.nbytes(),
                    dtype = t.scalar_type()](Session& s, ptrdiff_t off) {
                     source->store(eccl::recvAny(s, *mailbox, tag,
                                                 ember::atOffset(data, off),
                                                 bytes, dtype));
                   }});
  c10::static_intrusive_pointer_cast<EcclWork>(work)->setSource(source);
  return work;
}

} // namespace ember::eccl
// ember-book: end eccl_backend_point_to_point

// ember-book: begin eccl_backend_forwarding
namespace ember::eccl {

c10::intrusive_ptr<c10d::Work> EcclBackend::allreduce_coalesced(
    std::vector<at::Tensor>& tensors,
    const c10d::AllreduceCoalescedOptions& opts) {
  return coalesced([&] {
    for (at::Tensor& t : tensors) {
      std::vector<at::Tensor> one{t};
      allreduce(one, opts);
    }
  });
}

c10::intrusive_ptr<c10d::Work> EcclBackend::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(output.numel() == input.numel() * getSize() &&
                  output.scalar_type() == input.scalar_type(),
              "eccl: all_gather_into_tensor needs an output of ", getSize(),
              " x ", input.numel(), " ", input.scalar_type(),
              " elements, got ", output.numel(), " ", output.scalar_type());
  std::vector<at::Tensor> blocks;
  for (const int r : c10::irange(getSize())) {
    blocks.push_back(output.flatten().narrow(0, r * input.numel(),
                                             input.numel()));
  }
  std::vector<std::vector<at::Tensor>> outputs{blocks};
  std::vector<at::Tensor> inputs{input};
  auto work = allgather(outputs, inputs, opts);
  return work;
}

c10::intrusive_ptr<c10d::Work> EcclBackend::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "eccl: all_gather_into_tensor_coalesced needs as many outputs "
              "as inputs");
  return coalesced([&] {
    for (const size_t i : c10::irange(inputs.size())) {
      _allgather_base(outputs[i], inputs[i], opts);
    }
  });
}

// dist.all_gather_coalesced: outputs[r][i] receives input i of rank r.
// Backend.hpp asks new backends to implement _allgather_base instead, but
// dist still calls this one and gloo answers it: one all_gather per input.
// The lists are checked before anything is issued.
c10::intrusive_ptr<c10d::Work> EcclBackend::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputs,
    std::vector<at::Tensor>& inputs, const c10d::AllgatherOptions& opts) {
  TORCH_CHECK(static_cast<int>(outputs.size()) == getSize(),
              "eccl: all_gather_coalesced needs an output list for each of "
              "the ", getSize(), " ranks, got ", outputs.size());
  for (const std::vector<at::Tensor>& list : outputs) {
    TORCH_CHECK(list.size() == inputs.size(), "eccl: all_gather_coalesced ",
                "needs, in each output list, a tensor for each of the ",
                inputs.size(), " inputs, got ", list.size());
  }
  return coalesced([&] {
    for (const size_t i : c10::irange(inputs.size())) {
      std::vector<std::vector<at::Tensor>> gathered(1);
      for (const std::vector<at::Tensor>& list : outputs) {
        gathered[0].push_back(list[i]);
      }
      std::vector<at::Tensor> one{inputs[i]};
      allgather(gathered, one, opts);
    }
  });
}

c10::intrusive_ptr<c10d::Work> EcclBackend::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  TORCH_CHECK(outputs.size() == inputs.size(),
              "eccl: reduce_scatter_tensor_coalesced needs as many outputs "
              "as inputs");
  return coalesced([&] {
    for (const size_t i : c10::irange(inputs.size())) {
      _reduce_scatter_base(outputs[i], inputs[i], opts);
    }
  });
}

} // namespace ember::eccl
// ember-book: end eccl_backend_forwarding
