"""Square bf16 GEMM, C = A @ B: the compute-bound baseline every tensor-core kernel is measured on."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "compute-bound"]

M = 4096
N = 4096
K = 4096

SHAPES = {
    "small": {"M": 64, "N": 48, "K": 80},
    "odd": {"M": 4001, "N": 3999, "K": 4093},
    "tall": {"M": 16384, "N": 1024, "K": 4096},
}


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N) * K**-0.5]


def get_init_inputs():
    return []


def flops(M, N, K):
    return 2.0 * M * N * K


def bytes_moved(M, N, K):
    return 2.0 * (M * K + K * N + M * N)
