"""Attention probabilities as unfused attention computes them (bf16): scores scaled by
1/sqrt(d), a causal mask, then softmax in fp32."""

import math

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["softmax", "attention", "causal", "fusion", "memory-bound"]

BATCH = 4
HEADS = 32
SEQ = 2048
HEAD_DIM = 128

SHAPES = {
    "small": {"BATCH": 1, "HEADS": 2, "SEQ": 9, "HEAD_DIM": 16},
    # the CPU backend's default: eager takes a few ms on one core
    "cpu": {"BATCH": 1, "HEADS": 3, "SEQ": 1024, "HEAD_DIM": 64},
    "odd": {"BATCH": 2, "HEADS": 12, "SEQ": 1999, "HEAD_DIM": 64},
    "long": {"BATCH": 1, "HEADS": 16, "SEQ": 8192, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        seq = scores.shape[-1]
        causal = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).tril()
        masked = (scores.float() * self.scale).masked_fill(~causal, float("-inf"))
        return torch.softmax(masked, dim=-1).to(scores.dtype)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, SEQ) * math.sqrt(HEAD_DIM)]


def get_init_inputs():
    return [HEAD_DIM]


def flops(BATCH, HEADS, SEQ):
    return 5.0 * BATCH * HEADS * SEQ * SEQ / 2


def bytes_moved(BATCH, HEADS, SEQ):
    # The masked upper triangle need not be read, only written (as zeros).
    return 2.0 * BATCH * HEADS * SEQ * SEQ * 1.5
