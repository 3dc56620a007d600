// The fused LSTM and GRU cells. For a CUDA or PrivateUse1 input, ATen's
// lstm_cell and gru_cell (behind nn.LSTM, nn.LSTMCell, nn.GRU, nn.GRUCell)
// call _thnn_fused_lstm_cell / _thnn_fused_gru_cell, operators that only CUDA
// implements: the CPU fallback finds no CPU kernel and every recurrent layer
// failed on ember. The device-generic tests (the capstone chapter) found it.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include <optional>
#include <tuple>

// ember-book: begin recurrent_cells
namespace ember {

// a + b for an optional b.
at::Tensor plus(const at::Tensor& a, const std::optional<at::Tensor>& b) {
  return b.has_value() && b->defined() ? a.add(*b) : a;
}

// The gradient of an output that did not take part in the loss is absent.
at::Tensor orZeros(const std::optional<at::Tensor>& grad,
                   const at::Tensor& like) {
  return grad.has_value() && grad->defined() ? *grad : at::zeros_like(like);
}

// s * (1 - s): the derivative of the sigmoid, from its value s.
at::Tensor sigmoidSlope(const at::Tensor& s) {
  return s.mul(s.neg().add(1));
}

// LSTM: the gates x W_ih^T and h W_hh^T (computed by the caller) plus the
// biases, split into input, forget, cell and output gates. The workspace
// keeps the activated gates for the backward: the operator's contract is
// only that our backward reads what our forward wrote.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& cx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  const at::Tensor gates =
      plus(plus(input_gates.add(hidden_gates), input_bias), hidden_bias);
  const auto chunks = gates.chunk(4, 1);
  const at::Tensor i = chunks[0].sigmoid(), f = chunks[1].sigmoid();
  const at::Tensor g = chunks[2].tanh(), o = chunks[3].sigmoid();
  at::Tensor cy = f.mul(cx).add(i.mul(g));
  at::Tensor hy = o.mul(cy.tanh());
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

// Returns the gradient of the (pre-activation) gates, of cx, and of the
// bias (the gates' gradient summed over the batch) when there is one.
std::tuple<at::Tensor, at::Tensor, at::Tensor> fusedLstmCellBackward(
    const std::optional<at::Tensor>& grad_hy,
    const std::optional<at::Tensor>& grad_cy, const at::Tensor& cx,
    const at::Tensor& cy, const at::Tensor& workspace, bool has_bias) {
  const auto gates = workspace.chunk(4, 1);
  const at::Tensor &i = gates[0], &f = gates[1], &g = gates[2], &o = gates[3];
  const at::Tensor dh = orZeros(grad_hy, cy), tanh_cy = cy.tanh();
  // cy reaches the loss directly and through hy = o * tanh(cy).
  const at::Tensor dc = orZeros(grad_cy, cy).add(
      dh.mul(o).mul(tanh_cy.mul(tanh_cy).neg().add(1)));
  const at::Tensor grad_gates = at::cat(
      {dc.mul(g).mul(sigmoidSlope(i)), dc.mul(cx).mul(sigmoidSlope(f)),
       dc.mul(i).mul(g.mul(g).neg().add(1)),
       dh.mul(tanh_cy).mul(sigmoidSlope(o))},
      1);
  at::Tensor grad_bias = has_bias ? grad_gates.sum(0) : at::Tensor();
  return {grad_gates, dc.mul(f), grad_bias};
}

// GRU: reset r and update z gates, and the new gate
// n = tanh(x W_in + b_in + r * (h W_hn + b_hn)); hy = n + z * (hx - n).
// The workspace keeps r, z, n, hx and the hidden part of n's input.
std::tuple<at::Tensor, at::Tensor> fusedGruCell(
    const at::Tensor& input_gates, const at::Tensor& hidden_gates,
    const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
    const std::optional<at::Tensor>& hidden_bias) {
  const auto in = plus(input_gates, input_bias).chunk(3, 1);
  const auto hid = plus(hidden_gates, hidden_bias).chunk(3, 1);
  const at::Tensor r = in[0].add(hid[0]).sigmoid();
  const at::Tensor z = in[1].add(hid[1]).sigmoid();
  const at::Tensor n = in[2].add(r.mul(hid[2])).tanh();
  at::Tensor hy = n.add(z.mul(hx.sub(n)));
  return {hy, at::cat({r, z, n, hx, hid[2]}, 1)};
}

// Returns the gradients of the input gates, the hidden gates, hx, and the
// two biases (when there are biases).
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor>
fusedGruCellBackward(const at::Tensor& grad_hy, const at::Tensor& workspace,
                     bool has_bias) {
  const auto parts = workspace.chunk(5, 1);
  const at::Tensor &r = parts[0], &z = parts[1], &n = parts[2];
  const at::Tensor &hx = parts[3], &hidden_n = parts[4];
  const at::Tensor dz = grad_hy.mul(hx.sub(n)).mul(sigmoidSlope(z));
  // n's pre-activation: hy depends on n with weight (1 - z).
  const at::Tensor dn =
      grad_hy.mul(z.neg().add(1)).mul(n.mul(n).neg().add(1));
  const at::Tensor dr = dn.mul(hidden_n).mul(sigmoidSlope(r));
  at::Tensor grad_input_gates = at::cat({dr, dz, dn}, 1);
  at::Tensor grad_hidden_gates = at::cat({dr, dz, dn.mul(r)}, 1);
  at::Tensor grad_hx = grad_hy.mul(z);
  if (!has_bias) {
    return {grad_input_gates, grad_hidden_gates, grad_hx, at::Tensor(),
            at::Tensor()};
  }
  at::Tensor grad_input_bias = grad_input_gates.sum(0);
  at::Tensor grad_hidden_bias = grad_hidden_gates.sum(0);
  return {grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias,
          grad_hidden_bias};
}

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", &fusedLstmCell);
  m.impl("_thnn_fused_lstm_cell_backward_impl", &fusedLstmCellBackward);
  m.impl("_thnn_fused_gru_cell", &fusedGruCell);
  m.impl("_thnn_fused_gru_cell_backward", &fusedGruCellBackward);
}

} // namespace ember
// ember-book: end recurrent_cells
