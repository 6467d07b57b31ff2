"""Decode-step attention over a KV cache in bf16: one new query token per sequence attends to
its cached keys and values, with GQA and a per-sequence cache length (positions at or past the
length are padding and must be ignored). Split-K (flash-decoding) territory: memory-bound."""

import math

import torch
import torch.nn as nn

DTYPE = "bfloat16"
TAGS = ["attention", "online-softmax", "gqa", "decode", "kv-cache", "llm", "memory-bound"]

BATCH = 32
Q_HEADS = 32
KV_HEADS = 8
CACHE = 8192
HEAD_DIM = 128

SHAPES = {
    "small": {"BATCH": 2, "Q_HEADS": 4, "KV_HEADS": 2, "CACHE": 40, "HEAD_DIM": 16},
    "odd": {"BATCH": 5, "Q_HEADS": 28, "KV_HEADS": 4, "CACHE": 3001, "HEAD_DIM": 128},
    "long": {"BATCH": 4, "Q_HEADS": 64, "KV_HEADS": 8, "CACHE": 131072, "HEAD_DIM": 128},
}


class Model(nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        # q: (B, Hq, D); caches: (B, Hkv, CACHE, D); lengths: (B,) int64 in [1, CACHE]
        batch, q_heads, dim = q.shape
        kv_heads = k_cache.shape[1]
        qg = q.float().view(batch, kv_heads, q_heads // kv_heads, dim)
        scores = torch.einsum("bhgd,bhsd->bhgs", qg, k_cache.float()) / math.sqrt(dim)
        valid = torch.arange(k_cache.shape[2], device=q.device)[None, :] < lengths[:, None]
        scores = scores.masked_fill(~valid[:, None, None, :], float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = torch.einsum("bhgs,bhsd->bhgd", probs, v_cache.float())
        return out.reshape(batch, q_heads, dim).to(q.dtype)


def get_inputs():
    return [
        torch.randn(BATCH, Q_HEADS, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, CACHE, HEAD_DIM),
        torch.randn(BATCH, KV_HEADS, CACHE, HEAD_DIM),
        torch.randint(1, CACHE + 1, (BATCH,)),
    ]


def get_init_inputs():
    return []


def flops(BATCH, Q_HEADS, CACHE, HEAD_DIM):
    return 4.0 * BATCH * Q_HEADS * (CACHE + 1) / 2 * HEAD_DIM


def bytes_moved(BATCH, Q_HEADS, KV_HEADS, CACHE, HEAD_DIM):
    # Only the valid prefix of each cache must be read: lengths average (CACHE + 1) / 2.
    return 2.0 * BATCH * HEAD_DIM * (KV_HEADS * (CACHE + 1) + 2 * Q_HEADS) + 8.0 * BATCH
