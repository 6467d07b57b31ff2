"""The first half of a Llama MLP in bf16: gate and up projections and SwiGLU in one pass,
silu(x @ Wg^T) * (x @ Wu^T), so the (TOKENS x 2*FFN) intermediate need not reach DRAM."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["gemm", "glu", "fusion", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096
FFN = 14336

SHAPES = {
    "small": {"TOKENS": 12, "HIDDEN": 32, "FFN": 40},
    "odd": {"TOKENS": 1531, "HIDDEN": 4096, "FFN": 11001},
    "decode": {"TOKENS": 32, "HIDDEN": 8192, "FFN": 28672},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(ffn, hidden) * hidden**-0.5)
        self.up = nn.Parameter(torch.randn(ffn, hidden) * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x @ self.gate.t()) * (x @ self.up.t())


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, FFN]


def flops(TOKENS, HIDDEN, FFN):
    return 4.0 * TOKENS * HIDDEN * FFN + 5.0 * TOKENS * FFN


def bytes_moved(TOKENS, HIDDEN, FFN):
    return 2.0 * (TOKENS * HIDDEN + 2 * FFN * HIDDEN + TOKENS * FFN)
