"""SwiGLU activation, silu(gate) * up, on the concatenated [gate | up] output of an MLP's first
projection (Llama-3-8B: ffn 14336), in bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["activation", "glu", "elementwise", "llm", "memory-bound"]

TOKENS = 8192
FFN = 14336

SHAPES = {
    "small": {"TOKENS": 8, "FFN": 40},
    "odd": {"TOKENS": 1001, "FFN": 11001},
    "large": {"TOKENS": 16384, "FFN": 28672},
}


class Model(nn.Module):
    def forward(self, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)
        return (F.silu(gate.float()) * up.float()).to(gate_up.dtype)


def get_inputs():
    return [torch.randn(TOKENS, 2 * FFN) * 2.0]


def get_init_inputs():
    return []


def flops(TOKENS, FFN):
    return 5.0 * TOKENS * FFN


def bytes_moved(TOKENS, FFN):
    return 2.0 * 3 * TOKENS * FFN
