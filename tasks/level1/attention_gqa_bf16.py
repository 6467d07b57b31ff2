"""Causal grouped-query attention in bf16 (Llama-3 layout: 32 query heads share 8 KV heads), so a
kernel must map each query head to its KV head instead of materialising repeated K and V."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["attention", "online-softmax", "gqa", "causal", "llm", "compute-bound"]

BATCH = 2
Q_HEADS = 32
KV_HEADS = 8
SEQ = 4096
HEAD_DIM = 128

SHAPES = {
    "small": {"BATCH": 1, "Q_HEADS": 4, "KV_HEADS": 2, "SEQ": 20, "HEAD_DIM": 16},
    "odd": {"BATCH": 3, "Q_HEADS": 28, "KV_HEADS": 4, "SEQ": 1537, "HEAD_DIM": 128},
    "long": {"BATCH": 1, "Q_HEADS": 64, "KV_HEADS": 8, "SEQ": 8192, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        group = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(q.shape[-1]))


def get_inputs():
    return [
        torch.randn(BATCH, Q_HEADS, SEQ, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, SEQ, HEAD_DIM),
    ]


def get_init_inputs():
    return []


def flops(BATCH, Q_HEADS, SEQ, HEAD_DIM):
    return 4.0 * BATCH * Q_HEADS * SEQ * SEQ * HEAD_DIM / 2


def bytes_moved(BATCH, Q_HEADS, KV_HEADS, SEQ, HEAD_DIM):
    return 2.0 * BATCH * SEQ * HEAD_DIM * (2 * Q_HEADS + 2 * KV_HEADS)
