"""Sum over the last dimension of a 2-D fp32 tensor (a plain reduction)."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["reduction", "memory-bound"]
TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}  # like cumsum: order-dependent fp32 rounding near zero

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 5, "COLS": 64},
    "cpu": {"ROWS": 4096, "COLS": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 3001, "COLS": 9999},
    "tall": {"ROWS": 1048576, "COLS": 128},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 1.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * (ROWS * COLS + ROWS)
