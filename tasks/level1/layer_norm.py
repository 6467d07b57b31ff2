"""LayerNorm with affine weight and bias over the hidden size, in bf16 (fp32 statistics)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["norm", "llm", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096
EPS = 1e-5

SHAPES = {
    "small": {"TOKENS": 16, "HIDDEN": 64},
    "cpu": {"TOKENS": 2048, "HIDDEN": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 2999, "HIDDEN": 1000},
    "wide": {"TOKENS": 4096, "HIDDEN": 12288},
}


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.layer_norm(x.float(), x.shape[-1:], self.weight.float(), self.bias.float(), self.eps)
        return out.to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN) * 2.0 + 0.5]


def get_init_inputs():
    return [HIDDEN, EPS]


def flops(TOKENS, HIDDEN):
    return 7.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (2 * TOKENS * HIDDEN + 2 * HIDDEN)
