"""Attention output projection, residual add and the next RMSNorm in bf16: o @ Wo^T + residual,
then RMSNorm. Returns the normalised activation and the new residual stream."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "norm", "fusion", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096

SHAPES = {
    "small": {"TOKENS": 6, "HIDDEN": 40},
    "odd": {"TOKENS": 2047, "HIDDEN": 5000},
    "large": {"TOKENS": 4096, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.o_proj = nn.Parameter(torch.randn(hidden, hidden) * hidden**-0.5)
        self.norm_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, attn_out: torch.Tensor, residual: torch.Tensor):
        total = attn_out @ self.o_proj.t() + residual
        tf = total.float()
        normed = tf * torch.rsqrt(tf.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * self.norm_weight.float()
        return normed.to(total.dtype), total


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def flops(TOKENS, HIDDEN):
    return 2.0 * TOKENS * HIDDEN * HIDDEN + 6.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (HIDDEN * HIDDEN + 4 * TOKENS * HIDDEN + HIDDEN)
