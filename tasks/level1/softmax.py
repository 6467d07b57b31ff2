"""Row softmax over a long last dimension in fp32 (the classic memory-bound reduction)."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["softmax", "reduction", "memory-bound"]

ROWS = 4096
COLS = 32768

SHAPES = {
    "small": {"ROWS": 8, "COLS": 48},
    "cpu": {"ROWS": 1024, "COLS": 4096},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 1001, "COLS": 30001},
    "short_rows": {"ROWS": 262144, "COLS": 512},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS) * 3.0]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 4.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
