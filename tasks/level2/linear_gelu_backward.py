"""Backward pass of y = gelu(x @ w^T + b) in bf16: the gradients of x, w and b from the upstream
gradient, by autograd. A fused kernel recomputes the pre-activation or keeps it on chip, and
reduces the weight and bias gradients over all tokens."""

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["backward", "gemm", "activation", "fusion", "compute-bound"]

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

SHAPES = {
    "small": {"TOKENS": 12, "IN_FEATURES": 20, "OUT_FEATURES": 16},
    "odd": {"TOKENS": 2047, "IN_FEATURES": 1000, "OUT_FEATURES": 3001},
    "mlp_up": {"TOKENS": 8192, "IN_FEATURES": 2048, "OUT_FEATURES": 8192},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, grad_out: torch.Tensor):
        with torch.enable_grad():
            xg, wg, bg = (t.detach().requires_grad_() for t in (x, w, b))
            y = F.gelu(F.linear(xg, wg, bg))
            return torch.autograd.grad(y, (xg, wg, bg), grad_out)


def get_inputs():
    return [
        torch.randn(TOKENS, IN_FEATURES),
        torch.randn(OUT_FEATURES, IN_FEATURES) * IN_FEATURES**-0.5,
        0.5 * torch.randn(OUT_FEATURES),
        torch.randn(TOKENS, OUT_FEATURES) * TOKENS**-0.5,
    ]


def get_init_inputs():
    return []


def flops(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 6.0 * TOKENS * IN_FEATURES * OUT_FEATURES + 12.0 * TOKENS * OUT_FEATURES


def bytes_moved(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 2.0 * (2 * TOKENS * IN_FEATURES + 2 * IN_FEATURES * OUT_FEATURES + TOKENS * OUT_FEATURES
                  + 2 * OUT_FEATURES)
