"""A classic fp32 dense layer: relu(x @ W^T + b)."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["gemm", "activation", "fusion", "compute-bound"]

BATCH = 4096
IN_FEATURES = 4096
OUT_FEATURES = 4096

SHAPES = {
    "small": {"BATCH": 8, "IN_FEATURES": 24, "OUT_FEATURES": 20},
    "odd": {"BATCH": 1001, "IN_FEATURES": 3001, "OUT_FEATURES": 1999},
    "wide": {"BATCH": 512, "IN_FEATURES": 8192, "OUT_FEATURES": 16384},
}


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.bias = nn.Parameter(0.5 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(F.linear(x, self.weight, self.bias))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


def flops(BATCH, IN_FEATURES, OUT_FEATURES):
    return 2.0 * BATCH * IN_FEATURES * OUT_FEATURES + 2.0 * BATCH * OUT_FEATURES


def bytes_moved(BATCH, IN_FEATURES, OUT_FEATURES):
    return 4.0 * (BATCH * IN_FEATURES + IN_FEATURES * OUT_FEATURES + OUT_FEATURES + BATCH * OUT_FEATURES)
