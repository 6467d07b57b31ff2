"""Causal multi-head attention in bf16, softmax(Q K^T / sqrt(d) + causal mask) V: the prefill
kernel that online-softmax (flash) attention computes without materialising the scores."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["attention", "online-softmax", "causal", "llm", "compute-bound"]

BATCH = 4
HEADS = 32
SEQ = 4096
HEAD_DIM = 128

SHAPES = {
    "small": {"BATCH": 1, "HEADS": 2, "SEQ": 24, "HEAD_DIM": 16},
    "odd": {"BATCH": 2, "HEADS": 12, "SEQ": 1999, "HEAD_DIM": 64},
    "long": {"BATCH": 1, "HEADS": 32, "SEQ": 16384, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(q.shape[-1]))


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    return [torch.randn(shape), torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return []


def flops(BATCH, HEADS, SEQ, HEAD_DIM):
    return 4.0 * BATCH * HEADS * SEQ * SEQ * HEAD_DIM / 2


def bytes_moved(BATCH, HEADS, SEQ, HEAD_DIM):
    return 2.0 * 4 * BATCH * HEADS * SEQ * HEAD_DIM
