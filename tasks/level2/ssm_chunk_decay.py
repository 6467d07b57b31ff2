"""Mamba-2's intra-chunk decay, fp32: the log-decay dt * A (A = -exp(A_log), one rate per head)
summed along each chunk, exponentiated and applied to x: y = x * exp(cumsum(dt * A, dim=-1)).

Eager runs a multiply, a scan, an exp and a multiply, each a pass over memory; torch.compile fuses
the elementwise ops around the scan but calls ATen's scan between them."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float32"
TAGS = ["scan", "fusion", "llm", "memory-bound"]

BATCH = 8
HEADS = 32
CHUNKS = 64
CHUNK = 256

SHAPES = {
    "small": {"BATCH": 2, "HEADS": 3, "CHUNKS": 2, "CHUNK": 37},
    # the CPU backend's default: eager takes a few ms on one core
    "cpu": {"BATCH": 4, "HEADS": 16, "CHUNKS": 128, "CHUNK": 256},
    "odd": {"BATCH": 3, "HEADS": 7, "CHUNKS": 5, "CHUNK": 1001},
    "long_chunk": {"BATCH": 2, "HEADS": 8, "CHUNKS": 2, "CHUNK": 8192},
}


class Model(nn.Module):
    def __init__(self, heads: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 8.0, heads)))

    def forward(self, x: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        A = -torch.exp(self.A_log)
        decay = torch.exp(torch.cumsum(dt * A[:, None, None], dim=-1))
        return x * decay


def get_inputs():
    x = torch.randn(BATCH, HEADS, CHUNKS, CHUNK)
    dt = F.softplus(torch.randn(BATCH, HEADS, CHUNKS, CHUNK) - 5.0)  # a step size, as after Mamba's softplus
    return [x, dt]


def get_init_inputs():
    return [HEADS]


def flops(BATCH, HEADS, CHUNKS, CHUNK):
    return 4.0 * BATCH * HEADS * CHUNKS * CHUNK


def bytes_moved(BATCH, HEADS, CHUNKS, CHUNK):
    return 4.0 * 3 * BATCH * HEADS * CHUNKS * CHUNK
