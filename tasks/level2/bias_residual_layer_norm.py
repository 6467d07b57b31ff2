"""Post-projection bias add, residual add and LayerNorm in bf16 (BERT/ViT post-norm): returns the
normalised output and the pre-norm sum."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["norm", "fusion", "memory-bound"]

TOKENS = 16384
HIDDEN = 4096

SHAPES = {
    "small": {"TOKENS": 6, "HIDDEN": 36},
    "cpu": {"TOKENS": 1024, "HIDDEN": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"TOKENS": 3001, "HIDDEN": 1000},
    "vit_h": {"TOKENS": 65536, "HIDDEN": 1280},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(0.5 * torch.randn(hidden))
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        total = x + self.bias + residual
        out = F.layer_norm(total.float(), total.shape[-1:], self.ln_weight.float(), self.ln_bias.float(), 1e-5)
        return out.to(x.dtype), total


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN) * 2.0]


def get_init_inputs():
    return [HIDDEN]


def flops(TOKENS, HIDDEN):
    return 9.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (4 * TOKENS * HIDDEN + 3 * HIDDEN)
