"""Mixture-of-experts router (bf16 activations, fp32 routing): logits = x @ Wr^T, softmax over
experts, the top-k probabilities renormalised to sum to one. Returns the routing weights
sorted in descending order (values only, so equal probabilities cannot reorder the answer)."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["moe", "topk", "softmax", "gemm", "fusion", "llm", "memory-bound"]
TOLERANCE = {"atol": 1e-2, "rtol": 1e-2}  # fp32 weights in [0, 1] from bf16 GEMM logits

TOKENS = 16384
HIDDEN = 4096
EXPERTS = 64
TOP_K = 8

SHAPES = {
    "small": {"TOKENS": 10, "HIDDEN": 32, "EXPERTS": 8, "TOP_K": 2},
    "odd": {"TOKENS": 3001, "HIDDEN": 2880, "EXPERTS": 60, "TOP_K": 4},
    "many_experts": {"TOKENS": 8192, "HIDDEN": 7168, "EXPERTS": 256, "TOP_K": 8},
}


class Model(nn.Module):
    def __init__(self, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Parameter(torch.randn(experts, hidden) * 2.0 * hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax((x @ self.router.t()).float(), dim=-1)
        top = torch.topk(probs, self.top_k, dim=-1, sorted=True).values
        return top / top.sum(dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, EXPERTS, TOP_K]


def flops(TOKENS, HIDDEN, EXPERTS):
    return 2.0 * TOKENS * HIDDEN * EXPERTS + 5.0 * TOKENS * EXPERTS


def bytes_moved(TOKENS, HIDDEN, EXPERTS, TOP_K):
    return 2.0 * (TOKENS * HIDDEN + EXPERTS * HIDDEN) + 4.0 * TOKENS * TOP_K
