"""GeGLU activation, gelu_tanh(gate) * up (Gemma's MLP), on separate gate and up tensors, in bf16."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["activation", "glu", "elementwise", "llm", "memory-bound"]

TOKENS = 8192
FFN = 16384

SHAPES = {
    "small": {"TOKENS": 6, "FFN": 36},
    "odd": {"TOKENS": 999, "FFN": 9215},
    "large": {"TOKENS": 16384, "FFN": 24576},
}


class Model(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return (F.gelu(gate.float(), approximate="tanh") * up.float()).to(gate.dtype)


def get_inputs():
    return [torch.randn(TOKENS, FFN) * 2.0, torch.randn(TOKENS, FFN)]


def get_init_inputs():
    return []


def flops(TOKENS, FFN):
    return 10.0 * TOKENS * FFN


def bytes_moved(TOKENS, FFN):
    return 2.0 * 3 * TOKENS * FFN
