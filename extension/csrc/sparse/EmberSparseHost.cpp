// The sparse host kernel (EmberSparseHost.h): the CPU's sparse kernels on
// ember's memory. A sparse tensor is a small object holding dense members
// (COO: indices and values); PyTorch's CPU kernels for it read the members'
// data with plain loops, which is what an ember kernel may do inside a launch
// (aten/EmberHostKernels.h). So the CPU's sparse tensor is rebuilt around
// host views of the ember members, without a copy, and handed to the CPU's
// kernel. Only the results it allocates are copied, to the device, after the
// launch.

#include "sparse/EmberSparseHost.h"
#include "aten/EmberHostKernels.h"

// ember-book: begin sparse_host_twins
#include <ATen/SparseCsrTensorImpl.h>
#include <ATen/SparseCsrTensorUtils.h>
#include <ATen/SparseTensorImpl.h>
#include <ATen/core/ivalue.h>
#include <ATen/native/SparseTensorUtils.h>
#include <ATen/ops/_sparse_compressed_tensor_unsafe.h>
#include <ATen/ops/_sparse_coo_tensor_with_dims_and_tensors.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/DispatchKeySet.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace ember::sparse {

std::vector<at::Tensor> members(const at::Tensor& t) {
  // The impl's own fields: no dispatch, and values() of an uncoalesced COO
  // tensor is not refused as the operator would.
  if (t.layout() == at::kSparse) {
    const auto* impl = at::sparse::get_sparse_impl(t);
    return {impl->indices(), impl->values()};
  }
  if (at::sparse_csr::is_sparse_compressed(t)) {
    const auto* impl = at::sparse_csr::get_sparse_csr_impl(t);
    return {impl->compressed_indices(), impl->plain_indices(), impl->values()};
  }
  return {t};
}

namespace {

// A tensor of `like`'s layout, size and flags around `parts` (its members),
// on the parts' device.
at::Tensor assemble(const at::Tensor& like,
                    const std::vector<at::Tensor>& parts) {
  if (like.layout() == at::kSparse) {
    const auto* impl = at::sparse::get_sparse_impl(like);
    return at::_sparse_coo_tensor_with_dims_and_tensors(
        impl->sparse_dim(), impl->dense_dim(), like.sizes(), parts[0], parts[1],
        like.options().device(parts[1].device()), impl->coalesced());
  }
  if (at::sparse_csr::is_sparse_compressed(like)) {
    return at::_sparse_compressed_tensor_unsafe(
        parts[0], parts[1], parts[2], like.sizes(),
        like.options().device(parts[2].device()));
  }
  return parts[0];
}

// Gives the ember sparse tensor `ember` the members (and size, flags) that
// the CPU's kernel gave its host twin `host`: an out= or in-place operator
// replaced them. `parts` are those members, already on the device.
void rebind(const at::Tensor& ember, const at::Tensor& host,
            const std::vector<at::Tensor>& parts) {
  if (ember.layout() == at::kSparse) {
    auto* impl = at::sparse::get_sparse_impl(ember);
    const auto* from = at::sparse::get_sparse_impl(host);
    // raw_resize_: the new size as is (resize_ refuses to shrink a non-empty
    // tensor, and the members are replaced next anyway).
    impl->raw_resize_(from->sparse_dim(), from->dense_dim(), host.sizes());
    impl->set_indices_and_values_unsafe(parts[0], parts[1]);
    impl->set_coalesced(from->coalesced());
    return;
  }
  at::sparse_csr::get_sparse_csr_impl(ember)->set_member_tensors(
      parts[0], parts[1], parts[2], host.sizes());
}

// An ember argument and its host twin on the stack.
struct Argument {
  size_t position;
  at::Tensor ember;
  std::vector<at::Tensor> ember_members;
  at::Tensor host;
  std::vector<at::Tensor> host_members; // the views handed over
  bool written = false;
  std::vector<at::Tensor> new_members; // written: what the kernel left (CPU)
  std::vector<bool> kept;              // written: member k is still the view
};

// A new result: the CPU tensor and its members, copied to the device later.
struct Result {
  size_t position;
  std::optional<size_t> argument; // returns that argument (out=, in-place)
  at::Tensor host;
  std::vector<at::Tensor> host_members;
};

} // namespace
// ember-book: end sparse_host_twins

// ember-book: begin sparse_host_kernel
void sparseHostKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string name = c10::toString(schema.operator_name());
  const size_t first = stack->size() - schema.arguments().size();
  std::vector<Argument> arguments;
  std::optional<at::Tensor> stray; // a CPU tensor that is not a scalar
  for (size_t i = first; i < stack->size(); ++i) {
    const c10::IValue& value = (*stack)[i];
    TORCH_CHECK(!value.isTensorList() && !value.isOptionalTensorList(),
                "ember: the sparse host kernel of ", name,
                " takes no tensor lists");
    if (!value.isTensor() || !value.toTensor().defined()) {
      continue;
    }
    const at::Tensor t = value.toTensor();
    if (t.is_privateuseone()) {
      const c10::AliasInfo* alias = schema.arguments()[i - first].alias_info();
      Argument argument{i, t, members(t)};
      argument.written = alias != nullptr && alias->isWrite();
      arguments.push_back(std::move(argument));
    } else if (!(t.is_cpu() && t.dim() == 0 && t.layout() == at::kStrided) &&
               !stray.has_value()) {
      stray = t;
    }
  }
  TORCH_CHECK(!arguments.empty(), "ember: ", name, " reached the sparse host ",
              "kernel without an ember tensor");
  const c10::Device device = arguments.front().ember.device();
  // The CPU's kernel would take a CPU tensor as is and mix devices: refused
  // in PyTorch's words, as the dense host kernel does.
  TORCH_CHECK(!stray.has_value(), "Expected all tensors to be on the same ",
              "device, but found at least two devices, ", device, " and ",
              stray->device(), "! (ember: ", name, " takes ember tensors and ",
              "CPU scalars)");
  std::vector<const at::Tensor*> buffers;
  for (const Argument& argument : arguments) {
    for (const at::Tensor& member : argument.ember_members) {
      buffers.push_back(&member);
    }
  }
  std::vector<Result> results;
  // The launch runs on the current device: make it the tensors' one.
  const c10::DeviceGuard guard(device);
  onHost(name.c_str(), device, buffers, [&](const HostView& view) {
    std::vector<const void*> viewed; // the storages of the host views
    c10::DispatchKeySet keys;
    for (Argument& argument : arguments) {
      for (const at::Tensor& member : argument.ember_members) {
        argument.host_members.push_back(view(member));
        viewed.push_back(argument.host_members.back().storage().data());
      }
      argument.host = assemble(argument.ember, argument.host_members);
      // Some CPU kernels look at requires_grad below autograd:
      // _sparse_mm_reduce_impl computes the argmax its backward needs only
      // then. The twin says what the caller's tensor says. (Autograd has
      // run already: nothing records a graph on the twins.)
      if (argument.ember.requires_grad()) {
        argument.host.set_requires_grad(true);
      }
      (*stack)[argument.position] = argument.host;
      keys = keys | argument.host.key_set();
    }
    for (size_t i = first; i < stack->size(); ++i) {
      if ((*stack)[i].isTensor() && (*stack)[i].toTensor().defined()) {
        keys = keys | (*stack)[i].toTensor().key_set(); // CPU scalars
      }
    }
    // A member the kernel left that shares a host view's memory: a view of
    // the device's memory, which must not outlive the launch. Cloned.
    const auto own = [&](const at::Tensor& member) {
      const bool aliases =
          member.defined() && member.has_storage() &&
          std::find(viewed.begin(), viewed.end(), member.storage().data()) !=
              viewed.end();
      return aliases ? member.clone() : member;
    };
    // The CPU's kernel, for the layouts the host twins have (SparseCPU for
    // COO, SparseCsrCPU for CSR, CPU for dense): the keys below autograd,
    // which has run already, for the ember call.
    op.redispatchBoxed(keys & c10::after_ADInplaceOrView_keyset, stack);
    for (Argument& argument : arguments) {
      if (!argument.written || argument.ember.layout() == at::kStrided) {
        continue; // a dense out= view was written in place
      }
      const std::vector<at::Tensor> left = members(argument.host);
      for (size_t k = 0; k < left.size(); ++k) {
        const bool kept = left[k].is_same(argument.host_members[k]);
        argument.kept.push_back(kept);
        argument.new_members.push_back(kept ? at::Tensor() : own(left[k]));
      }
    }
    const size_t count = schema.returns().size();
    for (size_t j = stack->size() - count; j < stack->size(); ++j) {
      const c10::IValue& value = (*stack)[j];
      TORCH_CHECK(!value.isTensorList(), "ember: the sparse host kernel of ",
                  name, " returns no tensor lists");
      if (!value.isTensor() || !value.toTensor().defined()) {
        continue;
      }
      Result result{j, std::nullopt, value.toTensor()};
      for (size_t k = 0; k < arguments.size(); ++k) {
        if (result.host.is_same(arguments[k].host)) {
          result.argument = k;
        }
      }
      if (!result.argument.has_value()) {
        for (const at::Tensor& member : members(result.host)) {
          result.host_members.push_back(own(member));
        }
      }
      results.push_back(std::move(result));
    }
  });
  // After the launch: the copies to the device.
  const auto toDevice = [&](const std::vector<at::Tensor>& parts) {
    std::vector<at::Tensor> moved;
    for (const at::Tensor& part : parts) {
      moved.push_back(part.to(device));
    }
    return moved;
  };
  for (Argument& argument : arguments) {
    if (argument.kept.empty()) {
      continue;
    }
    std::vector<at::Tensor> parts;
    for (size_t k = 0; k < argument.kept.size(); ++k) {
      parts.push_back(argument.kept[k] ? argument.ember_members[k]
                                       : argument.new_members[k].to(device));
    }
    rebind(argument.ember, argument.host, parts);
  }
  for (const Result& result : results) {
    (*stack)[result.position] =
        result.argument.has_value()
            ? arguments[*result.argument].ember
            : assemble(result.host, toDevice(result.host_members));
  }
}

} // namespace ember::sparse
// ember-book: end sparse_host_kernel
