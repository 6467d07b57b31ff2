"""ReLU on signed inputs, fp32 (half of them become zero: an identity or zeros answer fails)."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["activation", "elementwise", "memory-bound"]

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 4, "COLS": 33},
    "cpu": {"ROWS": 2048, "COLS": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 4097, "COLS": 9999},
    "flat": {"ROWS": 1, "COLS": 268435456},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 1.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
