"""Forward-mode AD through the fused recurrent cells on ember (issue 26).

ATen's `lstm_cell` and `gru_cell` (behind nn.LSTMCell, nn.GRUCell, nn.LSTM, nn.GRU) pick their path by
device type: a CUDA, XPU or PrivateUse1 input goes to `_thnn_fused_lstm_cell` / `_thnn_fused_gru_cell`,
a CPU input to a composite of matmuls and pointwise operators. The fused operators have a backward formula
in derivatives.yaml but no forward one, so `torch.func.jvp` and `jacfwd` raise NotImplementedError on
ember (and on CUDA, pytorch/pytorch#174355), while the CPU's composite differentiates operator by operator.

PyTorch's own remedy for a fused device operator without a forward formula is a forward-AD decomposition
(NOTE: [forward-mode AD decompositions mechanism] in torch/_decomp/decompositions_for_jvp.py; cuDNN's and
MIOpen's batch-norm backwards are there): when a tangent reaches such an operator, its autograd kernel runs
a TorchScript decomposition registered for it, built of operators that have forward formulas. Ember
registers one for each fused cell, computing the same results as its kernels (csrc/aten/EmberRecurrent.cpp),
workspace included. The alternative, an autograd kernel at AutogradPrivateUse1, would hide ATen's formulas
from torch.func (the autograd chapter).

The registry is keyed by operator, not by device, so each decomposition serves ember only: another device
still gets PyTorch's own sentence, though raised through TorchScript's interpreter (a torch.jit.Error
naming NotImplementedError, where PyTorch alone raises NotImplementedError itself). They
are registered when PyTorch registers its own, on the first forward-AD use (`make_dual` imports
decompositions_for_jvp), so `import torch_ember` does no TorchScript work.
"""

from __future__ import annotations

import torch

__all__ = ["register"]

# The sentence of the autograd kernel's own error (run_jit_decomposition_with_args_for_jvp).
_NOT_IMPLEMENTED = (
    "Trying to use forward AD with {} that does not support it because it has not been implemented yet."
)

_GRU_SOURCE = """
def gru_cell(input_gates: Tensor, hidden_gates: Tensor, hx: Tensor,
             input_bias: Optional[Tensor] = None,
             hidden_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor]:
    if input_gates.device.type != "ember":
        raise NotImplementedError(MESSAGE)
    if input_bias is not None:
        input_gates = input_gates + input_bias
    if hidden_bias is not None:
        hidden_gates = hidden_gates + hidden_bias
    i = input_gates.chunk(3, 1)
    h = hidden_gates.chunk(3, 1)
    r = (i[0] + h[0]).sigmoid()
    z = (i[1] + h[1]).sigmoid()
    n = (i[2] + r * h[2]).tanh()
    hy = n + z * (hx - n)
    return hy, torch.cat([r, z, n, hx, h[2]], 1)
"""

_LSTM_SOURCE = """
def lstm_cell(input_gates: Tensor, hidden_gates: Tensor, cx: Tensor,
              input_bias: Optional[Tensor] = None,
              hidden_bias: Optional[Tensor] = None) -> Tuple[Tensor, Tensor, Tensor]:
    if input_gates.device.type != "ember":
        raise NotImplementedError(MESSAGE)
    gates = input_gates + hidden_gates
    if input_bias is not None:
        gates = gates + input_bias
    if hidden_bias is not None:
        gates = gates + hidden_bias
    g = gates.chunk(4, 1)
    i = g[0].sigmoid()
    f = g[1].sigmoid()
    c = g[2].tanh()
    o = g[3].sigmoid()
    cy = f * cx + i * c
    hy = o * cy.tanh()
    return hy, cy, torch.cat([i, f, c, o], 1)
"""


def _graph(source: str, name: str, op_name: str) -> torch._C.Graph:
    unit = torch.jit.CompilationUnit(source.replace("MESSAGE", repr(_NOT_IMPLEMENTED.format(op_name))))
    return getattr(unit, name).graph


def register() -> None:
    """Register the fused cells' forward-AD decompositions (once; later calls do nothing)."""
    global _registered
    if _registered:
        return
    _registered = True
    aten = torch.ops.aten
    for op, source, name in (
        (aten._thnn_fused_gru_cell.default, _GRU_SOURCE, "gru_cell"),
        (aten._thnn_fused_lstm_cell.default, _LSTM_SOURCE, "lstm_cell"),
    ):
        torch.jit._register_decomposition(op, _graph(source, name, op.__name__.split(".")[0]))


_registered = False
