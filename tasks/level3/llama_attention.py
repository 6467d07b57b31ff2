"""A Llama-3 attention block in bf16: QKV projection, RoPE, causal grouped-query attention and
the output projection, for a batch of sequences starting at position 0."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["block", "attention", "gqa", "rope", "causal", "llm", "compute-bound"]

BATCH = 2
SEQ = 4096
HIDDEN = 4096
Q_HEADS = 32
KV_HEADS = 8
THETA = 500000.0

SHAPES = {
    "small": {"BATCH": 1, "SEQ": 10, "HIDDEN": 32, "Q_HEADS": 4, "KV_HEADS": 2},
    "odd": {"BATCH": 3, "SEQ": 1001, "HIDDEN": 3584, "Q_HEADS": 28, "KV_HEADS": 4},
    "long": {"BATCH": 1, "SEQ": 16384, "HIDDEN": 4096, "Q_HEADS": 32, "KV_HEADS": 8},
}


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE over x of shape (B, H, S, D) at positions 0..S-1, angles in fp32."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)


class Model(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.qkv = nn.Linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim, bias=False)
        self.o = nn.Linear(q_heads * self.head_dim, hidden, bias=False)
        nn.init.normal_(self.qkv.weight, std=hidden**-0.5)
        nn.init.normal_(self.o.weight, std=hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = x.shape
        d = self.head_dim
        q, k, v = self.qkv(x).split([self.q_heads * d, self.kv_heads * d, self.kv_heads * d], dim=-1)
        q = rope(q.view(batch, seq, self.q_heads, d).transpose(1, 2), self.theta)
        k = rope(k.view(batch, seq, self.kv_heads, d).transpose(1, 2), self.theta)
        v = v.view(batch, seq, self.kv_heads, d).transpose(1, 2)
        group = self.q_heads // self.kv_heads
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=1.0 / math.sqrt(d))
        return self.o(out.transpose(1, 2).reshape(batch, seq, -1))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, Q_HEADS, KV_HEADS, THETA]


def flops(BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS):
    d = HIDDEN // Q_HEADS
    proj = 2.0 * BATCH * SEQ * HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d
    return proj + 2.0 * BATCH * Q_HEADS * SEQ * SEQ * d


def bytes_moved(BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS):
    d = HIDDEN // Q_HEADS
    weights = HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d
    return 2.0 * (weights + 2 * BATCH * SEQ * HIDDEN)
