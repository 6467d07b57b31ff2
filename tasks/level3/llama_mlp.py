"""A Llama-3 MLP block in bf16: down(silu(gate(x)) * up(x)), three GEMMs and a GLU."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["block", "gemm", "glu", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096
FFN = 14336

SHAPES = {
    "small": {"TOKENS": 8, "HIDDEN": 32, "FFN": 48},
    "odd": {"TOKENS": 1531, "HIDDEN": 3584, "FFN": 18944},
    "decode": {"TOKENS": 64, "HIDDEN": 8192, "FFN": 28672},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False)
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)
        for layer, fan_in in ((self.gate, hidden), (self.up, hidden), (self.down, ffn)):
            nn.init.normal_(layer.weight, std=fan_in**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.silu(self.gate(x)) * self.up(x))


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, FFN]


def flops(TOKENS, HIDDEN, FFN):
    return 6.0 * TOKENS * HIDDEN * FFN


def bytes_moved(TOKENS, HIDDEN, FFN):
    return 2.0 * (3 * HIDDEN * FFN + 2 * TOKENS * HIDDEN)
