"""Top-k of fp32 LM logits per row (k = 64, sampling's first step), values only, sorted in
descending order, so ties cannot make two correct answers differ."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["topk", "selection", "llm", "memory-bound"]
TOLERANCE = {"atol": 0.0, "rtol": 0.0}  # selected values are copied, never computed

ROWS = 256
VOCAB = 128256
TOP_K = 64

SHAPES = {
    "small": {"ROWS": 3, "VOCAB": 100, "TOP_K": 5},
    "odd": {"ROWS": 77, "VOCAB": 151936, "TOP_K": 50},
    "wide_k": {"ROWS": 1024, "VOCAB": 128256, "TOP_K": 1024},
}


class Model(nn.Module):
    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.topk(logits, self.k, dim=-1, largest=True, sorted=True).values


def get_inputs():
    return [torch.randn(ROWS, VOCAB) * 4.0]


def get_init_inputs():
    return [TOP_K]


def flops(ROWS, VOCAB):
    return 1.0 * ROWS * VOCAB


def bytes_moved(ROWS, VOCAB, TOP_K):
    return 4.0 * (ROWS * VOCAB + ROWS * TOP_K)
