"""Causal attention with logit soft-capping (Gemma 2), in bf16: scores = cap * tanh(q k^T /
(sqrt(d) * cap)), causal mask, softmax, times V. Flash kernels must apply the cap inside the
online softmax; the reference materialises the scores."""

import math

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["attention", "online-softmax", "causal", "fusion", "llm", "compute-bound"]

BATCH = 2
HEADS = 16
SEQ = 4096
HEAD_DIM = 256
SOFTCAP = 50.0

SHAPES = {
    "small": {"BATCH": 1, "HEADS": 2, "SEQ": 11, "HEAD_DIM": 16},
    "odd": {"BATCH": 3, "HEADS": 8, "SEQ": 1499, "HEAD_DIM": 128},
    "long": {"BATCH": 1, "HEADS": 32, "SEQ": 8192, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def __init__(self, softcap: float):
        super().__init__()
        self.softcap = softcap

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        seq, dim = q.shape[-2], q.shape[-1]
        scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(dim)
        scores = self.softcap * torch.tanh(scores / self.softcap)
        causal = torch.ones(seq, seq, dtype=torch.bool, device=q.device).tril()
        probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        return (probs @ v.float()).to(q.dtype)


def get_inputs():
    shape = (BATCH, HEADS, SEQ, HEAD_DIM)
    # Queries scaled up so that the cap is reached on some scores, not only in theory.
    return [torch.randn(shape) * 8.0, torch.randn(shape), torch.randn(shape)]


def get_init_inputs():
    return [SOFTCAP]


def flops(BATCH, HEADS, SEQ, HEAD_DIM):
    return 4.0 * BATCH * HEADS * SEQ * SEQ * HEAD_DIM / 2


def bytes_moved(BATCH, HEADS, SEQ, HEAD_DIM):
    return 2.0 * 4 * BATCH * HEADS * SEQ * HEAD_DIM
