"""The fused QKV projection of a GQA decoder (32 query heads, 8 KV heads, head dim 128) in bf16."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "llm", "attention", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096
Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128

SHAPES = {
    "small": {"TOKENS": 24, "HIDDEN": 64, "Q_HEADS": 4, "KV_HEADS": 2, "HEAD_DIM": 16},
    "odd": {"TOKENS": 2047, "HIDDEN": 5120, "Q_HEADS": 40, "KV_HEADS": 8, "HEAD_DIM": 128},
    "large": {"TOKENS": 4096, "HIDDEN": 8192, "Q_HEADS": 64, "KV_HEADS": 8, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        out = (q_heads + 2 * kv_heads) * head_dim
        self.weight = nn.Parameter(torch.randn(out, hidden) * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM]


def flops(TOKENS, HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM):
    return 2.0 * TOKENS * HIDDEN * (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM


def bytes_moved(TOKENS, HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM):
    out = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
    return 2.0 * (TOKENS * HIDDEN + out * HIDDEN + TOKENS * out)
