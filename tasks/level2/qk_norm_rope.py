"""Per-head RMSNorm of queries and keys followed by RoPE (Qwen3/OLMo-2 style), in bf16: four
elementwise passes over Q and K that one kernel can do in a single read and write."""

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["norm", "rope", "fusion", "llm", "memory-bound"]

TOKENS = 16384
Q_HEADS = 32
KV_HEADS = 8
HEAD_DIM = 128
MAX_POS = 8192
THETA = 1000000.0

SHAPES = {
    "small": {"TOKENS": 7, "Q_HEADS": 4, "KV_HEADS": 2, "HEAD_DIM": 16, "MAX_POS": 32},
    "odd": {"TOKENS": 3001, "Q_HEADS": 40, "KV_HEADS": 8, "HEAD_DIM": 128, "MAX_POS": 4099},
    "large": {"TOKENS": 8192, "Q_HEADS": 64, "KV_HEADS": 4, "HEAD_DIM": 128, "MAX_POS": 32768},
}


def _rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6) * w


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


class Model(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.theta = theta
        self.q_weight = nn.Parameter(1.0 + 0.1 * torch.randn(head_dim))
        self.k_weight = nn.Parameter(1.0 + 0.1 * torch.randn(head_dim))

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        # q: (TOKENS, Q_HEADS, D), k: (TOKENS, KV_HEADS, D), positions: (TOKENS,)
        dim = q.shape[-1]
        inv_freq = 1.0 / (self.theta ** (torch.arange(0, dim, 2, device=q.device, dtype=torch.float32) / dim))
        angles = positions.float()[:, None] * inv_freq[None, :]
        cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
        q_out = _rope(_rms(q.float(), self.q_weight.float()), cos, sin)
        k_out = _rope(_rms(k.float(), self.k_weight.float()), cos, sin)
        return q_out.to(q.dtype), k_out.to(k.dtype)


def get_inputs():
    return [
        torch.randn(TOKENS, Q_HEADS, HEAD_DIM),
        torch.randn(TOKENS, KV_HEADS, HEAD_DIM),
        torch.randint(0, MAX_POS, (TOKENS,)),
    ]


def get_init_inputs():
    return [HEAD_DIM, THETA]


def flops(TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM):
    return 8.0 * TOKENS * (Q_HEADS + KV_HEADS) * HEAD_DIM


def bytes_moved(TOKENS, Q_HEADS, KV_HEADS, HEAD_DIM):
    return 2.0 * 2 * TOKENS * (Q_HEADS + KV_HEADS) * HEAD_DIM + 8.0 * TOKENS
