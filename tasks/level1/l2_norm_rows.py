"""Euclidean norm of each row of an embedding matrix in fp32 (sqrt of a sum of squares)."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["reduction", "norm", "memory-bound"]

ROWS = 1048576
DIM = 1024

SHAPES = {
    "small": {"ROWS": 6, "DIM": 40},
    "cpu": {"ROWS": 8192, "DIM": 1024},  # the CPU backend's default: eager takes a few ms on one core
    "odd": {"ROWS": 100003, "DIM": 769},
    "wide": {"ROWS": 4096, "DIM": 65536},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vector_norm(x, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return []


def flops(ROWS, DIM):
    return 2.0 * ROWS * DIM


def bytes_moved(ROWS, DIM):
    return 4.0 * (ROWS * DIM + ROWS)
