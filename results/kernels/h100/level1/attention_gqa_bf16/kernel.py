"""H100 reference kernel for level1/attention_gqa_bf16: causal grouped-query attention in bf16
(query head h reads KV head h // group), as a flash-attention forward pass in Triton that never
materialises the repeated K and V.

One program per (query tile, batch, KV head, slice of its query-head group). The BLOCK_M rows of
a query tile are HEADS_PER_PROG query heads of the same group times BLOCK_M / HEADS_PER_PROG
positions, so every K/V tile brought into shared memory feeds all of those heads at once (one
load, HEADS_PER_PROG times the use), and the causal diagonal is only BLOCK_M / HEADS_PER_PROG
positions wide, which shrinks the masked work. The group slices of one KV head are adjacent in
launch order, so the other slices find the same K/V tiles in L2. Inside, it is the usual
flash loop: S = Q K^T on the tensor cores (wgmma, fp32 accumulator) scaled by log2(e)/sqrt(d),
online softmax on exp2 with fp32 running max and sum, O rescaled and updated with P V (P in
bf16, fp32 accumulation); key tiles wholly below the diagonal run without any mask, only the
tiles crossing the diagonal are masked, and tiles above it are skipped. Heaviest query tiles
are launched first.

HEADS_PER_PROG is reduced in Python to the largest power of two that divides the group (the
odd variant's group of 7 packs one head). Ragged sequence lengths mask K/V loads past the end
(zero fill) and the Q load / O store of rows past the end; every valid row sees key 0, so no
row's sum is zero. Sequences shorter than a tile shrink the tiles (to at least 16 rows, tl.dot's
minimum); head dims that are not a power of two, or below 16, are padded with masked loads.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # rows per program: HEADS_PER_PROG heads x (BLOCK_M / HEADS_PER_PROG) positions
BLOCK_N = 64  # keys per inner-loop tile
HEADS_PER_PROG = 2  # query heads of one group packed into a program (upper bound, see above)
NUM_WARPS = 8
NUM_STAGES = 3
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [32, 64, 128],
    "HEADS_PER_PROG": [1, 2, 4],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
}

LOG2E = 1.4426950408889634


@triton.jit
def _attn_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, lo, hi, pos, offs_n, offs_d,
                seq_len, qk_scale, CAUSAL_MASK: tl.constexpr, HEAD_DIM: tl.constexpr, BLOCK_N: tl.constexpr):
    d_ok = offs_d[None, :] < HEAD_DIM
    for start_n in range(lo, hi, BLOCK_N):
        kn = start_n + offs_n
        kv_mask = d_ok
        if CAUSAL_MASK:
            kv_mask = (kn[:, None] < seq_len) & d_ok
        k = tl.load(k_base + kn[:, None].to(tl.int64) * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        if CAUSAL_MASK:
            s = tl.where(pos[:, None] >= kn[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + kn[:, None].to(tl.int64) * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _gqa_causal_fwd(q_ptr, k_ptr, v_ptr, o_ptr,
                    stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                    stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                    kv_heads, group, seq_len, qk_scale,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    HEADS_PER_PROG: tl.constexpr):
    POS_PER_PROG: tl.constexpr = BLOCK_M // HEADS_PER_PROG
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # heaviest query tiles first
    pid = tl.program_id(1)
    slices = group // HEADS_PER_PROG
    hc = pid % slices
    hk = (pid // slices) % kv_heads
    b = (pid // (slices * kv_heads)).to(tl.int64)
    k_base = k_ptr + b * stride_kb + hk.to(tl.int64) * stride_kh
    v_base = v_ptr + b * stride_vb + hk.to(tl.int64) * stride_vh

    rows = tl.arange(0, BLOCK_M)
    head = (hk * group + hc * HEADS_PER_PROG + rows // POS_PER_PROG).to(tl.int64)
    first = pid_m * POS_PER_PROG
    pos = first + rows % POS_PER_PROG
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = (pos[:, None] < seq_len) & (offs_d[None, :] < HEAD_DIM)
    q_rows = q_ptr + b * stride_qb + head * stride_qh + pos.to(tl.int64) * stride_qm
    q = tl.load(q_rows[:, None] + offs_d[None, :], mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # Key tiles that end at or before the tile's first position: no mask.
    split = (first // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attn_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, 0, split,
                                pos, offs_n, offs_d, seq_len, qk_scale,
                                CAUSAL_MASK=False, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)
    # Tiles crossing the diagonal: causal mask and sequence end.
    acc, l_i, m_i = _attn_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, split,
                                tl.minimum(first + POS_PER_PROG, seq_len), pos, offs_n, offs_d, seq_len, qk_scale,
                                CAUSAL_MASK=True, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)

    out = acc / l_i[:, None]
    o_rows = o_ptr + b * stride_ob + head * stride_oh + pos.to(tl.int64) * stride_om
    tl.store(o_rows[:, None] + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=row_ok)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def _heads_per_prog(group: int, block_m: int) -> int:
    """Largest power of two <= HEADS_PER_PROG that divides the group and leaves >= 16 positions."""
    hp = 1
    while hp * 2 <= HEADS_PER_PROG and group % (hp * 2) == 0 and block_m // (hp * 2) >= 16:
        hp *= 2
    return hp


def gqa_attention_causal(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    batch, q_heads, seq_len, head_dim = q.shape
    kv_heads = k.shape[1]
    group = q_heads // kv_heads
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    out = torch.empty((batch, q_heads, seq_len, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    hp = _heads_per_prog(group, BLOCK_M)
    # Short sequences: fewer positions per program, but never fewer than 16 rows in all.
    block_m = min(BLOCK_M, hp * triton.next_power_of_2(seq_len))
    block_m = max(block_m, 16)
    hp = min(hp, block_m // 16) if block_m >= 32 else 1
    block_n = min(BLOCK_N, _pow2_at_least(seq_len))
    grid = (triton.cdiv(seq_len, block_m // hp), batch * kv_heads * (group // hp))
    _gqa_causal_fwd[grid](
        q, k, v, out,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        kv_heads, group, seq_len, LOG2E / math.sqrt(head_dim),
        HEAD_DIM=head_dim, BLOCK_D=_pow2_at_least(head_dim), BLOCK_M=block_m, BLOCK_N=block_n,
        HEADS_PER_PROG=hp, num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return out


class ModelNew(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return gqa_attention_causal(q, k, v)
