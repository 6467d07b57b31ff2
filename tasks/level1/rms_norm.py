"""RMSNorm over the hidden size, as in Llama-family decoders: statistics in fp32, output in bf16."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["norm", "llm", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-6

SHAPES = {
    "small": {"TOKENS": 16, "HIDDEN": 64},
    "cpu": {"TOKENS": 2048, "HIDDEN": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 3001, "HIDDEN": 5000},
    "wide": {"TOKENS": 8192, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (normed * self.weight.float()).to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EPS]


def flops(TOKENS, HIDDEN):
    return 4.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (2 * TOKENS * HIDDEN + HIDDEN)
