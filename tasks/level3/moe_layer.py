"""A mixture-of-experts MLP layer in bf16 (Mixtral/Qwen-MoE style): a softmax router picks the
top-k experts per token, each expert is a SwiGLU MLP, outputs are combined with the renormalised
router weights. The reference loops over experts; a fast kernel groups tokens by expert."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["block", "moe", "grouped", "gemm", "glu", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096
FFN = 1536
EXPERTS = 16
TOP_K = 2

SHAPES = {
    "small": {"TOKENS": 12, "HIDDEN": 32, "FFN": 24, "EXPERTS": 4, "TOP_K": 2},
    "odd": {"TOKENS": 1001, "HIDDEN": 2048, "FFN": 1408, "EXPERTS": 60, "TOP_K": 4},
    "wide": {"TOKENS": 4096, "HIDDEN": 7168, "FFN": 2048, "EXPERTS": 64, "TOP_K": 8},
}


class Model(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Parameter(torch.randn(experts, hidden) * 2.0 * hidden**-0.5)
        self.gate = nn.Parameter(torch.randn(experts, ffn, hidden) * hidden**-0.5)
        self.up = nn.Parameter(torch.randn(experts, ffn, hidden) * hidden**-0.5)
        self.down = nn.Parameter(torch.randn(experts, hidden, ffn) * ffn**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        probs = torch.softmax((x @ self.router.t()).float(), dim=-1)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
        for e in range(self.router.shape[0]):
            token, slot = torch.nonzero(chosen == e, as_tuple=True)
            if token.numel() == 0:
                continue
            h = x[token]
            y = (F.silu(h @ self.gate[e].t()) * (h @ self.up[e].t())) @ self.down[e].t()
            out.index_add_(0, token, y.float() * weights[token, slot, None])
        return out.to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, FFN, EXPERTS, TOP_K]


def flops(TOKENS, HIDDEN, FFN, EXPERTS, TOP_K):
    return 2.0 * TOKENS * HIDDEN * EXPERTS + 6.0 * TOKENS * TOP_K * HIDDEN * FFN


def bytes_moved(TOKENS, HIDDEN, FFN, EXPERTS):
    return 2.0 * (EXPERTS * HIDDEN + 3 * EXPERTS * HIDDEN * FFN + 2 * TOKENS * HIDDEN)
