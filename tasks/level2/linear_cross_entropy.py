"""LM head fused with cross-entropy (bf16): per-token loss of softmax(h @ W^T) against targets,
over the Llama-3 vocabulary. A fused kernel never writes the (TOKENS x VOCAB) logits to DRAM
("cut cross-entropy"); the reference does."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["gemm", "loss", "softmax", "fusion", "llm", "compute-bound"]
# Losses are fp32 results of a bf16 GEMM: the logits' bf16 rounding moves each loss by ~1e-2.
TOLERANCE = {"atol": 2e-2, "rtol": 1e-2}

TOKENS = 8192
HIDDEN = 4096
VOCAB = 128256

SHAPES = {
    "small": {"TOKENS": 6, "HIDDEN": 32, "VOCAB": 70},
    "odd": {"TOKENS": 1001, "HIDDEN": 3584, "VOCAB": 151936},
    "gemma": {"TOKENS": 4096, "HIDDEN": 2304, "VOCAB": 256000},
}


class Model(nn.Module):
    def __init__(self, hidden: int, vocab: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(vocab, hidden) * 2.0 * hidden**-0.5)

    def forward(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        logits = hidden @ self.weight.t()
        return F.cross_entropy(logits.float(), targets, reduction="none")


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randint(0, VOCAB, (TOKENS,))]


def get_init_inputs():
    return [HIDDEN, VOCAB]


def flops(TOKENS, HIDDEN, VOCAB):
    return 2.0 * TOKENS * HIDDEN * VOCAB + 4.0 * TOKENS * VOCAB


def bytes_moved(TOKENS, HIDDEN, VOCAB):
    return 2.0 * (TOKENS * HIDDEN + VOCAB * HIDDEN) + 12.0 * TOKENS
