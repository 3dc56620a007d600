"""ember's custom operators written in Python (the custom_ops chapter).

`ember::custom_abs` and `ember::custom_l1_loss` are C++ operators (csrc/aten/EmberCustomOps.cpp),
with a C++ Meta kernel for fake tensors (and the autograd chapter's ember::custom_abs_ in EmberAutograd.cpp).
The two operators here are defined with
`torch.library.custom_op`, which writes the schema from the type annotations:

* ``ember::soft_shrink(Tensor x, float lambd) -> Tensor``: a CPU kernel, an ember kernel that runs
  `ember::custom_abs` on the device, a fake kernel and an autograd formula;
* ``ember::soft_shrink_(Tensor(a!) x, float lambd) -> ()``: the same in place, a mutating operator
  (``mutates_args={"x"}``), which torch.compile functionalizes (``auto_functionalized``).

The chapter shows the same functions in its cells; tests/chapters/test_chapter07_custom_ops.py checks that
their bodies match.
"""

import torch

__all__ = ["soft_shrink", "soft_shrink_"]

# The device type the ember kernels are registered for: "ember" once torch_ember has renamed
# PrivateUse1 (it imports this module after that), "privateuseone" before.
EMBER = torch._C._get_privateuse1_backend_name()


@torch.library.custom_op("ember::soft_shrink", mutates_args=(), device_types="cpu")
def soft_shrink(x: torch.Tensor, lambd: float) -> torch.Tensor:
    """x - lambd * sign(x) where |x| > lambd, else 0 (torch.nn.functional.softshrink)."""
    return torch.nn.functional.softshrink(x, lambd)


@soft_shrink.register_kernel(EMBER)
def _soft_shrink_ember(x: torch.Tensor, lambd: float) -> torch.Tensor:
    magnitude = torch.ops.ember.custom_abs(x)  # ember's own kernel, launched on the device
    return torch.where(magnitude > lambd, x - lambd * torch.sign(x), torch.zeros_like(x))


@soft_shrink.register_fake
def _soft_shrink_fake(x: torch.Tensor, lambd: float) -> torch.Tensor:
    # Shapes only: a new tensor like x (custom_op forbids returning an input).
    return torch.empty_like(x)


def _soft_shrink_setup_context(ctx, inputs, output) -> None:
    x, lambd = inputs
    ctx.save_for_backward(x)
    ctx.lambd = lambd


def _soft_shrink_backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    # d/dx soft_shrink = 1 where |x| > lambd, else 0; lambd is a float: no gradient.
    (x,) = ctx.saved_tensors
    return grad * (torch.ops.ember.custom_abs(x) > ctx.lambd), None


soft_shrink.register_autograd(_soft_shrink_backward, setup_context=_soft_shrink_setup_context)


@torch.library.custom_op("ember::soft_shrink_", mutates_args={"x"})
def soft_shrink_(x: torch.Tensor, lambd: float) -> None:
    """soft_shrink in place. A mutating custom op returns nothing: the caller's x changes."""
    x.copy_(soft_shrink(x, lambd))


@soft_shrink_.register_fake
def _soft_shrink_inplace_fake(x: torch.Tensor, lambd: float) -> None:
    return None
