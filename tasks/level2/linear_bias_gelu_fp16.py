"""GPT-2-style MLP up projection in fp16: gelu_tanh(x @ W^T + b), the bias and activation fused
into the GEMM's epilogue."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float16"
TAGS = ["gemm", "activation", "fusion", "compute-bound"]

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 16384

SHAPES = {
    "small": {"TOKENS": 16, "IN_FEATURES": 32, "OUT_FEATURES": 48},
    "odd": {"TOKENS": 2047, "IN_FEATURES": 1600, "OUT_FEATURES": 6401},
    "gpt2_xl": {"TOKENS": 16384, "IN_FEATURES": 1600, "OUT_FEATURES": 6400},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.bias = nn.Parameter(0.5 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(F.linear(x, self.weight, self.bias), approximate="tanh")


def get_inputs():
    return [torch.randn(TOKENS, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def flops(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 2.0 * TOKENS * IN_FEATURES * OUT_FEATURES + 10.0 * TOKENS * OUT_FEATURES


def bytes_moved(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 2.0 * (TOKENS * IN_FEATURES + IN_FEATURES * OUT_FEATURES + OUT_FEATURES + TOKENS * OUT_FEATURES)
