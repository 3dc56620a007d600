"""The fused LSTM and GRU cells (csrc/aten/EmberRecurrent.cpp): recurrent layers on ember equal the CPU's.

ATen sends the cells of nn.LSTM, nn.LSTMCell, nn.GRU and nn.GRUCell on a PrivateUse1 device to
_thnn_fused_lstm_cell / _thnn_fused_gru_cell, which have no CPU kernel for the fallback to run: without
ember's kernels each of these layers raised. Outputs and every gradient are compared in float64.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

LAYERS = [
    (nn.LSTMCell, (3, 4), (2, 3)),
    (nn.GRUCell, (3, 4), (2, 3)),
    (nn.LSTM, (3, 4, 2), (5, 2, 3)),
    (nn.GRU, (3, 4), (5, 2, 3)),
]


def _loss(output: object, weights: torch.Tensor) -> torch.Tensor:
    """A loss reaching every output: the sequence (or hidden state) and, for LSTMs, the cell state."""
    if isinstance(output, torch.Tensor):
        return (output * weights).sum()
    first, rest = output
    if isinstance(rest, tuple):  # nn.LSTM: (out, (h_n, c_n))
        return (first * weights).sum() + rest[1].sum()
    return (first * weights).sum() + rest.sum()  # LSTMCell: (h, c); GRU: (out, h_n)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("layer", "args", "shape"), LAYERS, ids=[cls.__name__ for cls, _, _ in LAYERS])
def test_recurrent_layer_matches_cpu(
    layer: type[nn.Module], args: tuple[int, ...], shape: tuple[int, ...], bias: bool
) -> None:
    torch.manual_seed(0)
    cpu = layer(*args, bias=bias).double()
    ember = layer(*args, bias=bias).double()
    ember.load_state_dict(cpu.state_dict())
    ember.to("ember")
    x = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
    x_ember = x.detach().to("ember").requires_grad_()

    expected, actual = cpu(x), ember(x_ember)
    first = expected if isinstance(expected, torch.Tensor) else expected[0]
    weights = torch.randn_like(first)
    _loss(expected, weights).backward()
    _loss(actual, weights.to("ember")).backward()

    actual_first = actual if isinstance(actual, torch.Tensor) else actual[0]
    assert actual_first.device.type == "ember"
    torch.testing.assert_close(actual_first.cpu(), first)
    torch.testing.assert_close(x_ember.grad.cpu(), x.grad)
    for (name, p), p_ember in zip(cpu.named_parameters(), ember.parameters(), strict=True):
        torch.testing.assert_close(p_ember.grad.cpu(), p.grad, msg=f"gradient of {name}")


# ---- forward-mode AD (issue 26) -----------------------------------------------------------------------


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("layer", [nn.GRUCell, nn.LSTMCell], ids=["GRUCell", "LSTMCell"])
def test_jvp_and_jacfwd_through_a_fused_cell_equal_the_cpus(layer: type[nn.Module], bias: bool) -> None:
    """On ember ATen runs the fused cell, which has no forward formula; torch_ember's forward-AD
    decomposition gives jvp and jacfwd the CPU's values (the CPU runs the unfused composite)."""
    torch.manual_seed(0)
    cpu = layer(3, 4, bias=bias).double()
    ember = layer(3, 4, bias=bias).double().to("ember")
    ember.load_state_dict(cpu.state_dict())
    x, tangent, h = torch.randn(2, 3).double(), torch.randn(2, 3).double(), torch.randn(2, 4).double()
    state = (h, h.flip(0)) if layer is nn.LSTMCell else h
    ember_state = tuple(s.to("ember") for s in state) if isinstance(state, tuple) else state.to("ember")

    def transforms(module: nn.Module, device: str, hidden: object) -> tuple[object, object]:
        def step(a: torch.Tensor) -> object:
            return module(a, hidden)

        primal = x.to(device)
        return torch.func.jvp(step, (primal,), (tangent.to(device),)), torch.func.jacfwd(step)(primal)

    results = [transforms(cpu, "cpu", state), transforms(ember, "ember", ember_state)]
    expected, got = (torch.utils._pytree.tree_flatten(r)[0] for r in results)
    assert len(expected) == len(got)
    for e, g in zip(expected, got, strict=True):
        assert g.device.type == "ember"
        torch.testing.assert_close(g.cpu(), e)


def test_the_decomposition_serves_ember_only() -> None:
    """The forward-AD registry is per operator: another device's call is still refused with PyTorch's
    sentence, raised through TorchScript's interpreter (torch.jit.Error, no longer NotImplementedError)."""
    torch.func.jvp(torch.sin, (torch.ones(1),), (torch.ones(1),))  # forward AD used: registered
    gates, hidden = torch.randn(2, 9), torch.randn(2, 3)
    op = torch.ops.aten._thnn_fused_gru_cell
    with pytest.raises(
        torch.jit.Error, match="NotImplementedError: Trying to use forward AD with _thnn_fused_gru_cell"
    ):
        torch.func.jvp(lambda g: op(g, gates, hidden), (gates,), (gates,))
