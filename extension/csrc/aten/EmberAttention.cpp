// Attention on ember (the autocast chapter): how scaled_dot_product_attention reaches
// a device, and ember's kernel behind it.
//
// - The choice. scaled_dot_product_attention is a composite that asks the
//   DispatchStub _fused_sdp_choice_stub, for the query's device type, which
//   SDPBackend to run (math, flash, efficient, cuDNN or overrideable). A
//   device whose slot is empty gets the math path, ember's operators one by
//   one. Ember fills the slot, and registers the same function as the
//   aten::_fused_sdp_choice operator, which callers ask through the
//   dispatcher.
// - The kernel. SDPBackend::overrideable is the backend left for devices
//   outside PyTorch: the composite calls
//   _scaled_dot_product_fused_attention_overrideable, whose autograd formula
//   calls its _backward. Ember's pair computes attention from ember's own
//   operators in float32, the way a fused kernel does: the forward keeps the
//   log-sum-exp of each row, and the backward recomputes the probabilities
//   from it instead of saving them.
// - Autocast runs scaled_dot_product_attention in the lower-precision dtype,
//   as CUDA's list does.
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ExpandUtils.h>
#include <ATen/SDPBackend.h>
#include <ATen/autocast_mode.h>
#include <c10/core/DeviceGuard.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "aten/EmberLoops.h"

// ember-book: begin sdpa_choice
#include <ATen/native/transformers/attention.h> // _fused_sdp_choice_stub

namespace ember {

// Which backend runs scaled_dot_product_attention on ember. The kernel
// below takes 4-D float32, float16 or bfloat16 tensors (batch, heads,
// sequence, features) with as many heads in key and value as in query, and
// no dropout (it would need ember's generator). Anything else, or a caller
// who disabled the overrideable backend (torch.nn.attention.sdpa_kernel),
// gets the math path, if that is enabled.
//
// So do torch.func's tensors (chapter 18). The composite makes this choice
// on vmap's batched tensors and grad's (or jvp's) wrappers themselves,
// before functorch unwraps them. functorch has no batching rule for the
// overrideable kernel, and its fallback (a loop over the batch) refuses an
// operator that returns integers, as this one does (max_q, max_k): vmap
// and vmap(grad) would stop at it. The math path is operators that all
// have batching rules and formulas, each reaching its ember kernel.
int64_t sdpaChoice(const at::Tensor& query, const at::Tensor& key,
                   const at::Tensor& value,
                   const std::optional<at::Tensor>& attn_mask,
                   double dropout_p, bool is_causal,
                   std::optional<double> scale, bool enable_gqa) {
  const auto floating = [](const at::Tensor& t) {
    const at::ScalarType dtype = t.scalar_type();
    return dtype == at::kFloat || dtype == at::kHalf ||
           dtype == at::kBFloat16;
  };
  // FuncTorchBatched (vmap), FuncTorchGradWrapper (grad, jvp, and a
  // vmap(grad) input: the wrapper hides the batched tensor inside it).
  const auto transformed = [](const at::Tensor& t) {
    return t.key_set().has_any(c10::functorch_transforms_ks);
  };
  const bool under_functorch =
      transformed(query) || transformed(key) || transformed(value) ||
      (attn_mask.has_value() && attn_mask->defined() &&
       transformed(*attn_mask));
  const bool fits = query.dim() == 4 && key.dim() == 4 && value.dim() == 4 &&
                    !query.is_nested() && floating(query) &&
                    key.scalar_type() == query.scalar_type() &&
                    value.scalar_type() == query.scalar_type() &&
                    key.size(1) == query.size(1) &&
                    value.size(1) == query.size(1) && dropout_p == 0.0 &&
                    !enable_gqa && !under_functorch;
  const at::Context& context = at::globalContext();
  if (fits && context.userEnabledOverrideableSDP()) {
    return static_cast<int64_t>(at::SDPBackend::overrideable);
  }
  TORCH_CHECK(context.userEnabledMathSDP(), "ember: no backend for ",
              "scaled_dot_product_attention: the math path is disabled, and ",
              fits ? "so is the overrideable one"
                   : "ember's kernel takes 4-D float tensors, one head count, "
                     "no dropout, no torch.func transform");
  return static_cast<int64_t>(at::SDPBackend::math);
}

} // namespace ember

// The composite calls the stub (a function pointer, chapter 4's kind of
// registration); the operator is the same question through the dispatcher.
EMBER_REGISTER_STUB(_fused_sdp_choice_stub, &ember::sdpaChoice);

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_fused_sdp_choice", TORCH_FN(ember::sdpaChoice));
}
// ember-book: end sdpa_choice

// ember-book: begin sdpa_overrideable
#include <algorithm> // std::stable_sort
#include <numeric>   // std::iota
#include <vector>

namespace ember {

using at::Tensor;

// The attention scores in float32: (query * scale) @ key^T, plus the bias,
// with -inf above the diagonal for a causal call (query i sees keys <= i).
Tensor attentionScores(const Tensor& query, const Tensor& key,
                       const Tensor& bias, bool is_causal, double scale) {
  Tensor scores = at::matmul(query.to(at::kFloat) * scale,
                             key.to(at::kFloat).transpose(-2, -1));
  if (bias.defined()) {
    scores = scores + bias.to(at::kFloat);
  }
  if (is_causal) {
    const Tensor above = at::ones({query.size(-2), key.size(-2)},
                                  query.options().dtype(at::kBool))
                             .triu(1);
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    scores = scores.masked_fill(above, kMasked);
  }
  return scores;
}

// A result laid out like `like`: torch.compile plans its buffers from the
// meta kernels and Inductor asserts every kernel's output strides. They
// give attention's output the query's dimension order (a query viewed as
// (B, H, L, E) from (B, L, H, E) yields an output laid out (B, L, H, E)),
// and each gradient its input's layout (empty_like).
Tensor inLayoutOf(const Tensor& like, at::IntArrayRef sizes,
                  const Tensor& values) {
  if (sizes.equals(like.sizes())) {
    return at::empty_like(like).copy_(values);
  }
  std::vector<int64_t> order(like.dim());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return like.stride(a) > like.stride(b);
  });
  std::vector<int64_t> strides(like.dim());
  int64_t stride = 1;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    strides[*it] = stride;
    stride *= sizes[*it];
  }
  return at::empty_strided(sizes, strides, like.options()).copy_(values);
}

double attentionScale(const Tensor& query, std::optional<double> scale) {
  // The default: 1 / sqrt(features per head).
  const auto features = static_cast<double>(query.size(-1));
  return scale.has_value() ? *scale : 1.0 / std::sqrt(features);
}

// Returns (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
// philox_seed, philox_offset, debug_attn_mask). Ember uses the first two:
// the output in the inputs' dtype, and each row's log-sum-exp (float32) for
// the backward. The rest are for variable-length batches and dropout.
std::tuple<Tensor, Tensor, Tensor, Tensor, c10::SymInt, c10::SymInt, Tensor,
           Tensor, Tensor>
sdpaForward(const Tensor& query, const Tensor& key, const Tensor& value,
            const std::optional<Tensor>& attn_bias, double dropout_p,
            bool is_causal, bool return_debug_mask,
            std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0 && !return_debug_mask, "ember: ",
              "scaled_dot_product_attention's kernel has no dropout");
  const c10::DeviceGuard guard(query.device());
  const Tensor bias = attn_bias.value_or(Tensor());
  const Tensor scores = attentionScores(query, key, bias, is_causal,
                                        attentionScale(query, scale));
  // Softmax with its log-sum-exp: subtract each row's maximum first (exp
  // of a large score overflows). A row with every key masked (all -inf)
  // gets zeros and a log-sum-exp of -inf, as the math path's safe softmax.
  Tensor row_max = std::get<0>(scores.max(-1, /*keepdim=*/true));
  row_max = row_max.masked_fill(row_max.isneginf(), 0.0);
  const Tensor weights = (scores - row_max).exp();
  const Tensor total = weights.sum(-1, /*keepdim=*/true);
  const Tensor probabilities = weights / total.masked_fill(total == 0, 1.0);
  const Tensor product = at::matmul(probabilities, value.to(at::kFloat));
  std::vector<int64_t> out_sizes = query.sizes().vec();
  out_sizes.back() = value.size(-1);
  const Tensor output = inLayoutOf(query, out_sizes, product);
  const Tensor logsumexp = (row_max + total.log()).squeeze(-1);
  // No dropout, so no random state; but the meta kernel returns a 0-dim
  // seed and offset, and Inductor's generated code asserts they are there.
  const Tensor seed = at::zeros({}, query.options().dtype(at::kLong));
  const Tensor offset = at::zeros({}, query.options().dtype(at::kLong));
  return {output,       logsumexp, Tensor(), Tensor(), query.size(-2),
          key.size(-2), seed,      offset,   Tensor()};
}

// The gradients from the saved log-sum-exp: P = exp(S - lse) is the
// forward's softmax again; dV = P^T dO, dS = P * (dO V^T - rowsum(dO * O)),
// dQ = dS K * scale, dK = dS^T Q * scale, and the bias's gradient is dS.
std::tuple<Tensor, Tensor, Tensor, Tensor> sdpaBackward(
    const Tensor& grad_out, const Tensor& query, const Tensor& key,
    const Tensor& value, const Tensor& attn_bias,
    std::array<bool, 4> grad_input_mask, const Tensor& out,
    const Tensor& logsumexp, const Tensor& /*cum_seq_q*/,
    const Tensor& /*cum_seq_k*/, c10::SymInt /*max_q*/,
    c10::SymInt /*max_k*/, double /*dropout_p*/, bool is_causal,
    const Tensor& /*philox_seed*/, const Tensor& /*philox_offset*/,
    std::optional<double> scale) {
  const c10::DeviceGuard guard(query.device());
  const double factor = attentionScale(query, scale);
  const Tensor scores =
      attentionScores(query, key, attn_bias, is_causal, factor);
  const Tensor lse = logsumexp.unsqueeze(-1);
  const Tensor probabilities =
      (scores - lse.masked_fill(lse.isneginf(), 0.0)).exp();
  const Tensor d_out = grad_out.to(at::kFloat);
  const Tensor row_dot =
      (d_out * out.to(at::kFloat)).sum(-1, /*keepdim=*/true);
  const Tensor d_scores =
      probabilities *
      (at::matmul(d_out, value.to(at::kFloat).transpose(-2, -1)) - row_dot);
  Tensor grad_query, grad_key, grad_value, grad_bias;
  if (grad_input_mask[0]) {
    grad_query = inLayoutOf(query, query.sizes(),
                            at::matmul(d_scores, key.to(at::kFloat)) * factor);
  }
  if (grad_input_mask[1]) {
    grad_key = inLayoutOf(
        key, key.sizes(),
        at::matmul(d_scores.transpose(-2, -1), query.to(at::kFloat)) * factor);
  }
  if (grad_input_mask[2]) {
    grad_value =
        inLayoutOf(value, value.sizes(),
                   at::matmul(probabilities.transpose(-2, -1), d_out));
  }
  if (attn_bias.defined()) {
    // Also when not asked for: the meta kernel returns it whenever there
    // is a bias. A bias broadcast over batch or heads gets the sum over
    // those.
    grad_bias = inLayoutOf(attn_bias, attn_bias.sizes(),
                           at::sum_to(d_scores, attn_bias.sizes()));
  }
  return {grad_query, grad_key, grad_value, grad_bias};
}

} // namespace ember

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         TORCH_FN(ember::sdpaForward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         TORCH_FN(ember::sdpaBackward));
}

// Under autocast, attention runs in the autocast dtype (CUDA's list has it
// too): the kernel above widens to float32 and rounds the output back.
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
  KERNEL_PRIVATEUSEONE(scaled_dot_product_attention, lower_precision_fp)
}
// ember-book: end sdpa_overrideable
