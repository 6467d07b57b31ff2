"""The down projection of a Llama-3-8B MLP in fp16: y = x @ W^T with W of shape (hidden, ffn)."""

import torch
import torch.nn as nn

DTYPE = "float16"
TAGS = ["gemm", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096
FFN = 14336

SHAPES = {
    "small": {"TOKENS": 32, "HIDDEN": 64, "FFN": 96},
    "odd": {"TOKENS": 1531, "HIDDEN": 4096, "FFN": 14336},
    "decode": {"TOKENS": 16, "HIDDEN": 4096, "FFN": 14336},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden, ffn) * ffn**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


def get_inputs():
    return [torch.randn(TOKENS, FFN)]


def get_init_inputs():
    return [HIDDEN, FFN]


def flops(TOKENS, HIDDEN, FFN):
    return 2.0 * TOKENS * HIDDEN * FFN


def bytes_moved(TOKENS, HIDDEN, FFN):
    return 2.0 * (TOKENS * FFN + HIDDEN * FFN + TOKENS * HIDDEN)
