"""Pre-norm LayerNorm feeding a linear layer, in fp16 (GPT/ViT pre-LN): the normalisation can be
applied while loading the GEMM's A tile."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "float16"
TAGS = ["norm", "gemm", "fusion", "compute-bound"]

TOKENS = 8192
HIDDEN = 2048
OUT_FEATURES = 6144

SHAPES = {
    "small": {"TOKENS": 6, "HIDDEN": 24, "OUT_FEATURES": 20},
    "odd": {"TOKENS": 3001, "HIDDEN": 1000, "OUT_FEATURES": 3003},
    "wide": {"TOKENS": 4096, "HIDDEN": 5120, "OUT_FEATURES": 15360},
}


class Model(nn.Module):
    def __init__(self, hidden: int, out_features: int):
        super().__init__()
        self.ln_weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.ln_bias = nn.Parameter(0.1 * torch.randn(hidden))
        self.weight = nn.Parameter(torch.randn(out_features, hidden) * hidden**-0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.layer_norm(x.float(), x.shape[-1:], self.ln_weight.float(), self.ln_bias.float(), 1e-5)
        return F.linear(h.to(x.dtype), self.weight, self.bias)


def get_inputs():
    return [torch.randn(TOKENS, HIDDEN) * 3.0 + 1.0]


def get_init_inputs():
    return [HIDDEN, OUT_FEATURES]


def flops(TOKENS, HIDDEN, OUT_FEATURES):
    return 2.0 * TOKENS * HIDDEN * OUT_FEATURES + 8.0 * TOKENS * HIDDEN


def bytes_moved(TOKENS, HIDDEN, OUT_FEATURES):
    return 2.0 * (TOKENS * HIDDEN + HIDDEN * OUT_FEATURES + TOKENS * OUT_FEATURES + 2 * HIDDEN + OUT_FEATURES)
