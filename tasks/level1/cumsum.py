"""Inclusive prefix sum (scan) along rows, in fp32."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["scan", "reduction", "memory-bound"]
# Any summation order of n fp32 terms errs by about eps * n * rms(x) near a zero crossing of the
# running sum, where the relative term gives no room: atol scales with the row length.
TOLERANCE = {"atol": 1e-3, "rtol": 1e-4}

ROWS = 4096
COLS = 32768

SHAPES = {
    "small": {"ROWS": 4, "COLS": 70},
    "cpu": {"ROWS": 512, "COLS": 8192},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 1001, "COLS": 12345},
    "long": {"ROWS": 64, "COLS": 1048576},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 1.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
