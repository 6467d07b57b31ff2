"""Out-of-place 2-D transpose into a contiguous result, fp32: pure data movement, where the
naive kernel reads or writes with a stride and wastes most of each memory transaction."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["copy", "layout", "memory-bound"]

ROWS = 16384
COLS = 16384

SHAPES = {
    "small": {"ROWS": 7, "COLS": 13},
    "odd": {"ROWS": 9999, "COLS": 3001},
    "skinny": {"ROWS": 1048576, "COLS": 64},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 0.0


def bytes_moved(ROWS, COLS):
    return 4.0 * 2 * ROWS * COLS
