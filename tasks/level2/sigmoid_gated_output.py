"""Gated attention output (Qwen3-Next style) in bf16: attn_out * sigmoid(x @ Wg^T), a GEMM whose
epilogue gates another tensor elementwise."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["gemm", "activation", "fusion", "llm", "compute-bound"]

TOKENS = 8192
HIDDEN = 4096

SHAPES = {
    "small": {"TOKENS": 7, "HIDDEN": 24},
    "odd": {"TOKENS": 3001, "HIDDEN": 2000},
    "large": {"TOKENS": 4096, "HIDDEN": 8192},
}


class Model(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.gate = nn.Parameter(torch.randn(hidden, hidden) * 2.0 * hidden**-0.5)

    def forward(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        return attn_out * torch.sigmoid(x @ self.gate.t())


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN)]


def get_init_inputs():
    return [HIDDEN]


def flops(TOKENS, HIDDEN):
    return 2.0 * TOKENS * HIDDEN * HIDDEN + 5.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN):
    return 2.0 * (HIDDEN * HIDDEN + 3 * TOKENS * HIDDEN)
