"""Backward pass of a row softmax (fp32): from the logits and the upstream gradient, the gradient
of the logits, y * (g - sum(g * y)), with y = softmax(x) recomputed, as attention backward does."""

import torch
import torch.nn as nn

DTYPE = "float32"
TAGS = ["backward", "softmax", "reduction", "memory-bound"]

ROWS = 8192
COLS = 8192

SHAPES = {
    "small": {"ROWS": 6, "COLS": 40},
    "odd": {"ROWS": 3001, "COLS": 4097},
    "long_rows": {"ROWS": 512, "COLS": 131072},
}


class Model(nn.Module):
    def forward(self, x: torch.Tensor, grad_out: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            xg = x.detach().requires_grad_()
            (grad_x,) = torch.autograd.grad(torch.softmax(xg, dim=-1), (xg,), grad_out)
        return grad_x


def get_inputs():
    return [torch.randn(ROWS, COLS) * 2.0, torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []


def flops(ROWS, COLS):
    return 8.0 * ROWS * COLS


def bytes_moved(ROWS, COLS):
    return 4.0 * 3 * ROWS * COLS
