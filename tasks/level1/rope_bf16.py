"""Rotary position embedding (RoPE, rotate-half layout, Llama-3 theta 500000) applied to one
head tensor at arbitrary token positions, in bf16 with angles computed in fp32."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["rope", "elementwise", "llm", "memory-bound"]

TOKENS = 16384
HEADS = 32
HEAD_DIM = 128
MAX_POS = 8192
THETA = 500000.0

SHAPES = {
    "small": {"TOKENS": 12, "HEADS": 2, "HEAD_DIM": 16, "MAX_POS": 64},
    "odd": {"TOKENS": 3001, "HEADS": 40, "HEAD_DIM": 96, "MAX_POS": 4099},
    "long_context": {"TOKENS": 8192, "HEADS": 64, "HEAD_DIM": 128, "MAX_POS": 131072},
}


class Model(nn.Module):
    def __init__(self, theta: float):
        super().__init__()
        self.theta = theta

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        # x: (TOKENS, HEADS, HEAD_DIM); positions: (TOKENS,) int64
        dim = x.shape[-1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


def get_inputs():
    return [torch.randn(TOKENS, HEADS, HEAD_DIM), torch.randint(0, MAX_POS, (TOKENS,))]


def get_init_inputs():
    return [THETA]


def flops(TOKENS, HEADS, HEAD_DIM):
    return 3.0 * TOKENS * HEADS * HEAD_DIM


def bytes_moved(TOKENS, HEADS, HEAD_DIM):
    return 2.0 * 2 * TOKENS * HEADS * HEAD_DIM + 8.0 * TOKENS
