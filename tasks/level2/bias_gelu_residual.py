"""residual + alpha * gelu(x + bias), fp32: the tail of a transformer MLP with a learned
per-channel bias and a residual scale (LayerScale)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["elementwise", "activation", "fusion", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096

SHAPES = {
    "small": {"TOKENS": 6, "HIDDEN": 20},
    "cpu": {"TOKENS": 1024, "HIDDEN": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 3001, "HIDDEN": 1001},
    "wide": {"TOKENS": 4096, "HIDDEN": 16384},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))
        self.alpha = nn.Parameter(0.5 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return residual + self.alpha * F.gelu(x + self.bias)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN) * 2.0, torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def flops(TOKENS, HIDDEN):
    return 11.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 4.0 * (3 * TOKENS * HIDDEN + 2 * HIDDEN)
