"""One decode step of a GQA attention block in bf16: project the new token to Q, K and V, apply
RoPE at each sequence's position, attend over the cached keys and values of that sequence plus
the new token, and project out. Sequence b has `positions[b]` cached tokens; cache slots at or
past that are garbage and must be ignored. (The cache is read, not written: a serving engine
appends the new K and V separately.)"""

import math

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["block", "attention", "gqa", "decode", "kv-cache", "rope", "llm", "memory-bound"]

BATCH = 64
HIDDEN = 4096
Q_HEADS = 32
KV_HEADS = 8
CACHE = 4096
THETA = 500000.0

SHAPES = {
    "small": {"BATCH": 2, "HIDDEN": 32, "Q_HEADS": 4, "KV_HEADS": 2, "CACHE": 12},
    "odd": {"BATCH": 7, "HIDDEN": 3584, "Q_HEADS": 28, "KV_HEADS": 4, "CACHE": 3001},
    "long": {"BATCH": 8, "HIDDEN": 8192, "Q_HEADS": 64, "KV_HEADS": 8, "CACHE": 32768},
}


def _rope(x: torch.Tensor, pos: torch.Tensor, theta: float) -> torch.Tensor:
    """x: (B, H, D) rotated at positions pos: (B,)."""
    dim = x.shape[-1]
    inv_freq = 1.0 / (theta ** (torch.arange(0, dim, 2, device=x.device, dtype=torch.float32) / dim))
    angles = pos.float()[:, None, None] * inv_freq
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat((x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()), -1)


class Model(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.qkv = nn.Parameter(torch.randn((q_heads + 2 * kv_heads) * self.head_dim, hidden) * hidden**-0.5)
        self.o = nn.Parameter(torch.randn(hidden, q_heads * self.head_dim) * hidden**-0.5)

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        # x: (B, HIDDEN); caches: (B, KV_HEADS, CACHE, D); positions: (B,) in [0, CACHE)
        batch, d, hq, hkv = x.shape[0], self.head_dim, self.q_heads, self.kv_heads
        q, k, v = (x @ self.qkv.t()).split([hq * d, hkv * d, hkv * d], dim=-1)
        q = _rope(q.view(batch, hq, d), positions, self.theta)
        k = _rope(k.view(batch, hkv, d), positions, self.theta)
        keys = torch.cat((k_cache.float(), k[:, :, None, :]), dim=2)
        values = torch.cat((v_cache.float(), v.float().view(batch, hkv, 1, d)), dim=2)
        slots = torch.arange(keys.shape[2], device=x.device)
        valid = (slots[None, :] < positions[:, None]) | (slots[None, :] == keys.shape[2] - 1)
        qg = q.view(batch, hkv, hq // hkv, d)
        scores = torch.einsum("bhgd,bhsd->bhgs", qg, keys) / math.sqrt(d)
        probs = torch.softmax(scores.masked_fill(~valid[:, None, None, :], float("-inf")), dim=-1)
        out = torch.einsum("bhgs,bhsd->bhgd", probs, values).reshape(batch, hq * d)
        return out.to(x.dtype) @ self.o.t()


def get_inputs():
    d = HIDDEN // Q_HEADS
    return [
        torch.randn(BATCH, HIDDEN),
        torch.randn(BATCH, KV_HEADS, CACHE, d),
        torch.randn(BATCH, KV_HEADS, CACHE, d),
        torch.randint(0, CACHE, (BATCH,)),
    ]


def get_init_inputs():
    return [HIDDEN, Q_HEADS, KV_HEADS, THETA]


def flops(BATCH, HIDDEN, Q_HEADS, KV_HEADS, CACHE):
    d = HIDDEN // Q_HEADS
    proj = 2.0 * BATCH * HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d
    return proj + 4.0 * BATCH * Q_HEADS * d * (CACHE / 2 + 1)


def bytes_moved(BATCH, HIDDEN, Q_HEADS, KV_HEADS, CACHE):
    d = HIDDEN // Q_HEADS
    weights = HIDDEN * (2 * Q_HEADS + 2 * KV_HEADS) * d
    # Positions average (CACHE - 1) / 2: only that valid prefix of each cache must be read.
    return 2.0 * (weights + BATCH * KV_HEADS * d * (CACHE - 1) + 2 * BATCH * HIDDEN) + 8.0 * BATCH
