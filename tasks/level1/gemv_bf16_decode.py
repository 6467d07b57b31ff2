"""Decode-time GEMV in bf16: a few tokens times a large weight (Llama-3-70B MLP up projection).

Reading the weight dominates: the kernel is bound by DRAM bandwidth, not tensor cores."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "gemv", "llm", "decode", "memory-bound"]

BATCH = 1
K = 8192
N = 28672

SHAPES = {
    "small": {"BATCH": 1, "K": 128, "N": 96},
    "odd": {"BATCH": 3, "K": 8191, "N": 5003},
    "batch8": {"BATCH": 8, "K": 8192, "N": 28672},
}


class Model(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n, k) * k**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight.t()


def get_inputs():
    return [torch.randn(BATCH, K)]


def get_init_inputs():
    return [K, N]


def flops(BATCH, K, N):
    return 2.0 * BATCH * K * N


def bytes_moved(BATCH, K, N):
    return 2.0 * (N * K + BATCH * K + BATCH * N)
