"""Backward pass of a bias-free linear layer y = x @ w^T in bf16: grad_x = grad_out @ w and
grad_w = grad_out^T @ x, two GEMMs with different transposes (the weight gradient reduces over
all tokens)."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["backward", "gemm", "llm", "compute-bound"]

TOKENS = 8192
IN_FEATURES = 4096
OUT_FEATURES = 4096

SHAPES = {
    "small": {"TOKENS": 20, "IN_FEATURES": 24, "OUT_FEATURES": 16},
    "odd": {"TOKENS": 3001, "IN_FEATURES": 1000, "OUT_FEATURES": 1999},
    "mlp_up": {"TOKENS": 8192, "IN_FEATURES": 4096, "OUT_FEATURES": 14336},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
        with torch.enable_grad():
            xg = x.detach().requires_grad_()
            wg = w.detach().requires_grad_()
            grad_x, grad_w = torch.autograd.grad(xg @ wg.t(), (xg, wg), grad_out)
        return grad_x, grad_w


def get_inputs():
    return [
        torch.randn(TOKENS, IN_FEATURES),
        torch.randn(OUT_FEATURES, IN_FEATURES) * IN_FEATURES**-0.5,
        torch.randn(TOKENS, OUT_FEATURES) * TOKENS**-0.5,
    ]


def get_init_inputs():
    return []


def flops(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 4.0 * TOKENS * IN_FEATURES * OUT_FEATURES


def bytes_moved(TOKENS, IN_FEATURES, OUT_FEATURES):
    return 2.0 * (2 * TOKENS * IN_FEATURES + 2 * IN_FEATURES * OUT_FEATURES + TOKENS * OUT_FEATURES)
