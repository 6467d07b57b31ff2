"""A whole Llama-3 decoder layer in bf16: RMSNorm, GQA attention with RoPE, residual, RMSNorm,
SwiGLU MLP, residual. The unit a serving engine optimises end to end."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPE = "bfloat16"
TAGS = ["block", "attention", "gqa", "rope", "norm", "glu", "causal", "llm", "compute-bound"]

BATCH = 1
SEQ = 4096
HIDDEN = 4096
Q_HEADS = 32
KV_HEADS = 8
FFN = 14336
THETA = 500000.0

SHAPES = {
    "small": {"BATCH": 1, "SEQ": 8, "HIDDEN": 32, "Q_HEADS": 4, "KV_HEADS": 2, "FFN": 48},
    "odd": {"BATCH": 2, "SEQ": 999, "HIDDEN": 3584, "Q_HEADS": 28, "KV_HEADS": 4, "FFN": 18944},
    "llama70b": {"BATCH": 1, "SEQ": 2048, "HIDDEN": 8192, "Q_HEADS": 64, "KV_HEADS": 8, "FFN": 28672},
}


class RMSNorm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight.float()).to(x.dtype)


def rope(x: torch.Tensor, theta: float) -> torch.Tensor:
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = torch.arange(seq, device=x.device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()), -1).to(x.dtype)


def _linear(fan_in: int, fan_out: int) -> nn.Linear:
    layer = nn.Linear(fan_in, fan_out, bias=False)
    nn.init.normal_(layer.weight, std=fan_in**-0.5)
    return layer


class Model(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, ffn: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = _linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim)
        self.o = _linear(q_heads * self.head_dim, hidden)
        self.gate, self.up, self.down = _linear(hidden, ffn), _linear(hidden, ffn), _linear(ffn, hidden)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attn_norm(x))
        m = self.mlp_norm(h)
        return h + self.down(F.silu(self.gate(m)) * self.up(m))


def get_inputs():
    return [torch.randn(BATCH, SEQ, HIDDEN)]


def get_init_inputs():
    return [HIDDEN, Q_HEADS, KV_HEADS, FFN, THETA]


def flops(BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS, FFN):
    d = HIDDEN // Q_HEADS
    tokens = BATCH * SEQ
    proj = 2.0 * tokens * HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d
    return proj + 2.0 * BATCH * Q_HEADS * SEQ * SEQ * d + 6.0 * tokens * HIDDEN * FFN


def bytes_moved(BATCH, SEQ, HIDDEN, Q_HEADS, KV_HEADS, FFN):
    d = HIDDEN // Q_HEADS
    weights = HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d + 3 * HIDDEN * FFN + 2 * HIDDEN
    return 2.0 * (weights + 2 * BATCH * SEQ * HIDDEN)
