// torch.mode: the most frequent value along a dimension, and where it is.
#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>
#include <utility>
#include <vector>

#include "aten/EmberHostKernels.h"

// ember-book: begin mode
#include <ATen/WrapDimUtils.h> // at::maybe_wrap_dim

namespace ember {

// mode's out= overload is CompositeExplicitAutograd, and its body refuses
// any device but the CPU, CUDA and XPU: without a kernel of ember's own,
// torch.mode(x, out=...) failed, and the functional form went through the
// CPU fallback, two copies. This one computes on the device's memory.
//
// The answer must equal the CPU's, ties included. The CPU sorts each row's
// (value, position) pairs by value, scans the runs of equal values, keeps
// the first run strictly longer than every run before it (so of equally
// frequent values the smallest wins), and reports the position of that
// run's last pair. The same steps give the same answer: the last
// occurrence of the value for rows the sort keeps in order, and NaN, equal
// to nothing, as a run of one per NaN.
template <typename T>
void modeOfRow(const T* row, int64_t n, T* value, int64_t* index,
               std::vector<std::pair<T, int64_t>>& pairs) {
  pairs.clear();
  for (int64_t k = 0; k < n; ++k) {
    pairs.emplace_back(row[k], k);
  }
  std::sort(pairs.begin(), pairs.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  int64_t best = 0;
  int64_t run = 0;
  for (int64_t k = 0; k < n; ++k) {
    ++run;
    const bool run_ends = k == n - 1 || pairs[k].first != pairs[k + 1].first;
    if (run_ends) {
      if (run > best) {
        best = run;
        *value = pairs[k].first;
        *index = pairs[k].second;
      }
      run = 0;
    }
  }
}

std::tuple<at::Tensor&, at::Tensor&> modeOut(const at::Tensor& self,
                                             int64_t dim, bool keepdim,
                                             at::Tensor& values,
                                             at::Tensor& indices) {
  dim = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK_INDEX(self.dim() == 0 || self.size(dim) > 0, "mode(): ",
                    "Expected reduction dim ", dim, " to have non-zero size.");
  // The words of ATen's own mode_out, which PyTorch's tests match.
  for (const auto& [name, out] : {std::pair{"values", &values},
                                  std::pair{"indices", &indices}}) {
    TORCH_CHECK(out->device() == self.device(), "mode: expected device '",
                self.device(), "' but got '", out->device(), "' for ", name,
                " output");
  }
  TORCH_CHECK(values.scalar_type() == self.scalar_type(), "mode: expected ",
              "scalar type '", self.scalar_type(), "' but got '",
              values.scalar_type(), "' for values output");
  TORCH_CHECK(indices.scalar_type() == at::kLong, "mode: expected scalar ",
              "type 'Long' but got '", indices.scalar_type(),
              "' for indices output");

  // The result's shape: self's, without dim (or with size 1 there).
  std::vector<int64_t> shape = self.sizes().vec();
  if (self.dim() > 0) {
    if (keepdim) {
      shape[dim] = 1;
    } else {
      shape.erase(shape.begin() + dim);
    }
  }
  at::native::resize_output(values, shape); // warns as the CPU does
  at::native::resize_output(indices, shape);
  if (self.dim() == 0) {
    values.copy_(self);
    indices.fill_(0);
    return {values, indices};
  }

  // Rows along the last dimension, contiguous (ember's copy), and
  // contiguous results of one element per row.
  const at::Tensor rows = self.movedim(dim, -1).contiguous();
  const int64_t n = rows.size(-1);
  const int64_t count = rows.numel() / n;
  at::Tensor row_values = at::empty({count}, self.options());
  at::Tensor row_indices = at::empty({count}, indices.options());
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool,
                             self.scalar_type(), "mode", [&] {
    onHost("aten::mode", self.device(), {&rows, &row_values, &row_indices},
           [&](const HostView& view) {
      const scalar_t* in = view(rows).const_data_ptr<scalar_t>();
      scalar_t* out_values = view(row_values).mutable_data_ptr<scalar_t>();
      int64_t* out_indices = view(row_indices).mutable_data_ptr<int64_t>();
      std::vector<std::pair<scalar_t, int64_t>> pairs;
      pairs.reserve(n);
      for (int64_t r = 0; r < count; ++r) {
        modeOfRow(in + r * n, n, out_values + r, out_indices + r, pairs);
      }
    });
  });
  values.copy_(row_values.view(shape));
  indices.copy_(row_indices.view(shape));
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> mode(const at::Tensor& self, int64_t dim,
                                        bool keepdim) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  modeOut(self, dim, keepdim, values, indices);
  return {values, indices};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("mode", &mode);
  m.impl("mode.values", &modeOut);
}

} // namespace ember
// ember-book: end mode
