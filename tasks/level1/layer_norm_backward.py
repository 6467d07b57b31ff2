"""Backward pass of LayerNorm (bf16): gradients of x, weight and bias from the upstream gradient,
computed by autograd in fp32. The weight and bias gradients are sums over all tokens; none of
the three depends on the bias itself, so the bias is not an input."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["backward", "norm", "llm", "memory-bound"]
# The weight and bias gradients sum TOKENS products: their bf16 rounding is relative, but an
# fp32 accumulation order still shifts sums that land near zero.
TOLERANCE = {"atol": 5e-2, "rtol": 2e-2}

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-5

SHAPES = {
    "small": {"TOKENS": 10, "HIDDEN": 40},
    "odd": {"TOKENS": 2999, "HIDDEN": 1000},
    "wide": {"TOKENS": 4096, "HIDDEN": 12288},
}


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
        with torch.enable_grad():
            xf, wf = (t.detach().float().requires_grad_() for t in (x, w))
            bf = torch.zeros_like(wf, requires_grad=True)
            y = F.layer_norm(xf, xf.shape[-1:], wf, bf, self.eps)
            grads = torch.autograd.grad(y, (xf, wf, bf), grad_out.float())
        return tuple(g.to(x.dtype) for g in grads)


def get_inputs():
    return [
        torch.randn(TOKENS, HIDDEN) * 2.0 + 0.5,
        1.0 + 0.1 * torch.randn(HIDDEN),
        torch.randn(TOKENS, HIDDEN),
    ]


def get_init_inputs():
    return [EPS]


def flops(TOKENS, HIDDEN):
    return 14.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (3 * TOKENS * HIDDEN + 3 * HIDDEN)
