"""SiLU (x * sigmoid(x)), fp32, on a wide range of signed inputs."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["activation", "elementwise", "memory-bound"]

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 3, "COLS": 50},
    "cpu": {"ROWS": 2048, "COLS": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 5001, "COLS": 4999},
    "flat": {"ROWS": 1, "COLS": 268435456},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 4.0]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 5.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
