"""Maximum over the first dimension of a 2-D fp32 tensor: a reduction across rows, where the
naive one-thread-per-output kernel reads memory with a large stride."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["reduction", "memory-bound"]

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 30, "COLS": 7},
    "odd": {"ROWS": 9999, "COLS": 3001},
    "wide": {"ROWS": 256, "COLS": 1048576},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.amax(dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 1.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * (ROWS * COLS + COLS)
