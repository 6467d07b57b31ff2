"""Residual add fused with RMSNorm (bf16), as between the blocks of a Llama decoder: returns the
normalised activation and the updated residual stream, which the next block reads."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["norm", "fusion", "llm", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-6

SHAPES = {
    "small": {"TOKENS": 10, "HIDDEN": 48},
    "cpu": {"TOKENS": 1024, "HIDDEN": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 3001, "HIDDEN": 5000},
    "wide": {"TOKENS": 8192, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        total = x + residual
        tf = total.float()
        normed = tf * torch.rsqrt(tf.pow(2).mean(dim=-1, keepdim=True) + self.eps) * self.weight.float()
        return normed.to(x.dtype), total


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN) * 3.0]


def get_init_inputs():
    return [HIDDEN, EPS]


def flops(TOKENS, HIDDEN):
    return 5.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (4 * TOKENS * HIDDEN + HIDDEN)
