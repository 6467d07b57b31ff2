"""Causal depthwise conv1d with a short kernel (width 4) and SiLU, as in Mamba/Mamba-2 and gated
delta-net layers: out[b, c, t] = silu(sum_j w[c, j] * x[b, c, t - 3 + j] + bias[c]), bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["conv", "depthwise", "ssm", "llm", "memory-bound"]

BATCH = 8
CHANNELS = 8192
SEQ = 4096
WIDTH = 4

SHAPES = {
    "small": {"BATCH": 2, "CHANNELS": 6, "SEQ": 11, "WIDTH": 4},
    "odd": {"BATCH": 3, "CHANNELS": 5003, "SEQ": 1999, "WIDTH": 4},
    "wide_kernel": {"BATCH": 4, "CHANNELS": 4096, "SEQ": 8192, "WIDTH": 7},
}


class Model(nn.Module):
    def __init__(self, channels: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, width) * width**-0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        width = self.weight.shape[-1]
        xf = F.pad(x.float(), (width - 1, 0))
        y = F.conv1d(xf, self.weight.float(), self.bias.float(), groups=x.shape[1])
        return F.silu(y).to(x.dtype)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, SEQ)]


def get_init_inputs():
    return [CHANNELS, WIDTH]


def flops(BATCH, CHANNELS, SEQ, WIDTH):
    return (2.0 * WIDTH + 5) * BATCH * CHANNELS * SEQ


def bytes_moved(BATCH, CHANNELS, SEQ, WIDTH):
    return 2.0 * (2 * BATCH * CHANNELS * SEQ + CHANNELS * (WIDTH + 1))
