"""Grouped GEMM of a mixture-of-experts layer in bf16: tokens sorted by expert, each group
multiplied by its own expert weight. Group sizes are uneven (expert e gets a share that grows
with e), as routing makes them in practice."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "grouped", "moe", "llm", "compute-bound"]

TOKENS = 16384
EXPERTS = 8
K = 4096
N = 2048

SHAPES = {
    "small": {"TOKENS": 40, "EXPERTS": 3, "K": 32, "N": 24},
    "odd": {"TOKENS": 3001, "EXPERTS": 6, "K": 1000, "N": 1400},
    "many_experts": {"TOKENS": 16384, "EXPERTS": 64, "K": 2048, "N": 768},
}


def group_sizes(tokens: int, experts: int) -> list[int]:
    """Expert e gets about (e + 1) / sum shares of the tokens; the last takes the remainder."""
    total = experts * (experts + 1) // 2
    sizes = [tokens * (e + 1) // total for e in range(experts - 1)]
    return [*sizes, tokens - sum(sizes)]


class Model(nn.Module):
    def __init__(self, tokens: int, experts: int, k: int, n: int):
        super().__init__()
        self.sizes = group_sizes(tokens, experts)
        self.weight = nn.Parameter(torch.randn(experts, k, n) * k**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = torch.split(x, self.sizes, dim=0)
        return torch.cat([g @ self.weight[e] for e, g in enumerate(groups)], dim=0)


def get_inputs():
    return [torch.randn(TOKENS, K)]


def get_init_inputs():
    return [TOKENS, EXPERTS, K, N]


def flops(TOKENS, K, N):
    return 2.0 * TOKENS * K * N


def bytes_moved(TOKENS, EXPERTS, K, N):
    return 2.0 * (TOKENS * K + EXPERTS * K * N + TOKENS * N)
