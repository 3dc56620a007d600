// eccl: ember's collective communication backend for torch.distributed.
#pragma once

#include "distributed/EcclCollectives.h"
#include "distributed/EcclLink.h"

// ember-book: begin eccl_work_api
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <c10/core/Stream.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ember::eccl {

// What a collective's kernel reports back to the host: how it failed.
class Outcome {
 public:
  void fail(std::string message);
  std::exception_ptr error() const;

 private:
  mutable std::mutex mutex_;
  std::exception_ptr error_;
};

// A collective in flight. It completes through an ember event recorded on
// the communication stream after the collective's kernel, as NCCL's work
// completes through a CUDA event: wait() makes the caller's current stream
// wait for it, not the host (barrier's excepted, which is for the host).
class EcclWork : public c10d::Work {
 public:
  EcclWork(int rank, c10d::OpType type, uint64_t seq, c10::Stream comm,
           std::shared_ptr<Outcome> outcome, std::vector<at::Tensor> outputs,
           bool host_waits);

  bool isCompleted() override;
  bool isSuccess() const override;
  std::exception_ptr exception() const override;
  bool wait(std::chrono::milliseconds timeout = kNoTimeout) override;
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;
  uint64_t getSequencenumber() const override;
  int sourceRank() const override;
  // recvAnysource's work: where its kernel will write the sender.
  void setSource(std::shared_ptr<std::atomic<int>> source) {
    source_ = std::move(source);
  }

 private:
  void rethrowIfFailed() const;

  const uint64_t seq_;
  const c10::Stream comm_;
  const std::shared_ptr<Outcome> outcome_;
  const std::vector<at::Tensor> outputs_;
  const bool host_waits_;
  c10::Event done_{c10::DeviceType::PrivateUse1};
  c10::intrusive_ptr<c10::ivalue::Future> future_;
  std::shared_ptr<std::atomic<int>> source_; // recvAnysource's sender
};
} // namespace ember::eccl
// ember-book: end eccl_work_api

// ember-book: begin eccl_backend_api
namespace ember::eccl {

class EcclBackend : public c10d::Backend {
 public:
  EcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank,
              int size, std::chrono::milliseconds timeout);
  ~EcclBackend() override;

  const std::string getBackendName() const override { return "eccl"; }
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;
  void shutdown() override;

  // Subgroups c10d splits from this group (split_group: DeviceMesh's
  // dimensions, when the group was made with device_id): each a backend of
  // its own, with its own link.
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions() override;
  c10::intrusive_ptr<c10d::Backend> split(
      const c10::intrusive_ptr<c10d::Store>& store,
      const std::vector<int>& ranks,
      const c10::intrusive_ptr<c10d::Backend::Options>& opts) override;
  void setSequenceNumberForGroup() override {} // every new group starts at 0
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputs,
      std::vector<at::Tensor>& inputs,
      const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs,
      std::vector<std::vector<at::Tensor>>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& output, at::Tensor& input,
      std::vector<int64_t>& output_split_sizes,
      std::vector<int64_t>& input_split_sizes,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors,
                                      int dst_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors,
                                      int src_rank, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(
      std::vector<at::Tensor>& tensors, int tag) override;

 private:
  // One collective: checked on the host, run by a kernel on the
  // communication stream. `body` gets a Session whose ranks have agreed on
  // `descriptor` (point-to-point calls have none), and the kernel's offset.
  struct Call {
    c10d::OpType type;
    std::string name;
    std::vector<at::Tensor> tensors; // every tensor the kernel touches
    std::vector<at::Tensor> outputs; // what the work's future holds
    std::chrono::milliseconds timeout;
    std::optional<Descriptor> descriptor;
    std::function<void(Session&, ptrdiff_t)> body;
    bool host_waits = false;
  };
  c10::intrusive_ptr<c10d::Work> run(Call call);
  // The stream a call runs on (the communication stream, or the sends'),
  // ordered after what it must follow.
  c10::Stream streamFor(c10d::OpType type, c10::Device device);
  // The communication stream waits for the coalesced sends issued so far.
  void joinSends();
  // A *_coalesced call's collectives as one work. Inside the caller's own
  // coalescing (_coalescing_manager(device=...) calls startCoalescing, then
  // allreduce_coalesced, then endCoalescing) they join it: its endCoalescing
  // makes the work.
  c10::intrusive_ptr<c10d::Work> coalesced(const std::function<void()>& issue);
  // The device the group runs on, fixed by its first tensor.
  c10::Device deviceFor(const std::vector<at::Tensor>& tensors,
                        const std::string& name);
  Descriptor describe(const std::string& name, c10d::OpType type,
                      const at::Tensor& tensor, int64_t numel);
  std::chrono::milliseconds timeoutOr(std::chrono::milliseconds timeout) const;
  void closeLink();

  const std::chrono::milliseconds timeout_;
  void* link_ = nullptr; // device address of the shared link
  std::string link_name_;
  bool link_named_ = true; // its name still exists (until every rank opened)
  std::optional<c10::Device> device_;
  std::optional<c10::Stream> comm_;
  std::optional<c10::Stream> sends_; // coalesced sends (streamFor)
  bool sends_pending_ = false;       // comm_ has not waited for them yet
  std::unique_ptr<c10::Event> fence_; // where the next coalesced send starts
  uint64_t seq_ = 0; // collectives issued so far
  std::shared_ptr<Outcome> failed_; // the first failure: the group is done
  bool coalescing_ = false;
  std::vector<at::Tensor> coalesced_;
  std::shared_ptr<Outcome> coalesced_outcome_;
  // Messages that came before the receive of their tag.
  std::shared_ptr<Mailbox> mailbox_ = std::make_shared<Mailbox>();
};

} // namespace ember::eccl
// ember-book: end eccl_backend_api
