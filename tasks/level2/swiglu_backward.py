"""Backward pass of SwiGLU, out = silu(gate) * up, in bf16: from gate, up and the upstream
gradient, the gradients of gate and up (autograd, fp32 inside)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["backward", "glu", "elementwise", "fusion", "llm", "memory-bound"]

TOKENS = 8192
FFN = 14336

SHAPES = {
    "small": {"TOKENS": 6, "FFN": 20},
    "odd": {"TOKENS": 1001, "FFN": 11001},
    "large": {"TOKENS": 16384, "FFN": 28672},
}


class Model(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor, grad_out: torch.Tensor):
        with torch.enable_grad():
            g = gate.detach().float().requires_grad_()
            u = up.detach().float().requires_grad_()
            grad_gate, grad_up = torch.autograd.grad(F.silu(g) * u, (g, u), grad_out.float())
        return grad_gate.to(gate.dtype), grad_up.to(up.dtype)


def get_inputs():
    return [torch.randn(TOKENS, FFN) * 2.0, torch.randn(TOKENS, FFN), torch.randn(TOKENS, FFN)]


def get_init_inputs():
    return []


def flops(TOKENS, FFN):
    return 12.0 * TOKENS * FFN


def bytes_moved(TOKENS, FFN):
    return 2.0 * 5 * TOKENS * FFN
