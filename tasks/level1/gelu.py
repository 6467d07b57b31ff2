"""Exact (erf) GELU, fp32: a kernel must not swap in the tanh approximation."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["activation", "elementwise", "memory-bound"]

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 5, "COLS": 31},
    "cpu": {"ROWS": 2048, "COLS": 2048},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 3001, "COLS": 7777},
    "flat": {"ROWS": 1, "COLS": 268435456},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 8.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
