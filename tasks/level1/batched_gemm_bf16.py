"""Batched bf16 GEMM, C[b] = A[b] @ B[b], with many independent products of one shape."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "batched", "compute-bound"]

BATCH = 32
M = 2048
N = 2048
K = 1024

SHAPES = {
    "small": {"BATCH": 3, "M": 32, "N": 40, "K": 24},
    "odd": {"BATCH": 7, "M": 1000, "N": 1500, "K": 777},
    "skinny": {"BATCH": 256, "M": 512, "N": 128, "K": 512},
}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N) * K**-0.5]


def get_init_inputs():
    return []


def flops(BATCH, M, N, K):
    return 2.0 * BATCH * M * N * K


def bytes_moved(BATCH, M, N, K):
    return 2.0 * BATCH * (M * K + K * N + M * N)
