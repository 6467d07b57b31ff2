"""Backward pass of RMSNorm (bf16): given x, the weight w and the upstream gradient, return the
gradients of x and of w. The reference differentiates the forward with autograd, in fp32."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["backward", "norm", "llm", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-6

SHAPES = {
    "small": {"TOKENS": 12, "HIDDEN": 48},
    "odd": {"TOKENS": 3001, "HIDDEN": 5000},
    "wide": {"TOKENS": 4096, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, eps: float):
        super().__init__()
        self.eps = eps

    def forward(self, x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
        with torch.enable_grad():
            xf = x.detach().float().requires_grad_()
            wf = w.detach().float().requires_grad_()
            y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps) * wf
            grad_x, grad_w = torch.autograd.grad(y, (xf, wf), grad_out.float())
        return grad_x.to(x.dtype), grad_w.to(w.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), 1.0 + 0.1 * torch.randn(HIDDEN), torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [EPS]


def flops(TOKENS, HIDDEN):
    return 10.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (3 * TOKENS * HIDDEN + 2 * HIDDEN)
