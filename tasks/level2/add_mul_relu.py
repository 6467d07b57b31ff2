"""An elementwise chain, relu(x * y + z) * s with a per-column scale s, fp32: four reads, one
write, and nothing to compute, if fused."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["elementwise", "fusion", "memory-bound"]

ROWS = 8192
COLS = 8192

SHAPES = {
    "small": {"ROWS": 5, "COLS": 12},
    "cpu": {"ROWS": 1024, "COLS": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 3001, "COLS": 4999},
    "flat": {"ROWS": 64, "COLS": 1048576},
}


class Model(nn.Module):
    def __init__(self, cols: int):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(cols))

    def forward(self, x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * y + z) * self.scale


def get_inputs():
    return [torch.randn(ROWS, COLS), torch.randn(ROWS, COLS), torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]


def flops(ROWS, COLS):
    return 4.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * (4 * ROWS * COLS + COLS)
