"""H100 reference kernel for level1/attention_decode_kvcache: one decode step of GQA attention
over a bf16 KV cache with a per-sequence length, as split-KV (flash-decoding) in Triton.

The work is the cache read: each valid K/V row must come from DRAM once, and nothing else is
large. Kernel 1 gives every (split, batch, KV head) its own program: the split is a run of
SPLIT_LEN cache positions, and the program loads the whole query-head group of that KV head as
the rows of one tile (the group padded to 16 rows for tl.dot), so each K/V tile is read from
DRAM once for all of the group's heads. It streams its positions in BLOCK_N-row tiles
(NUM_STAGES-deep pipelined loads), S = Q K^T on the tensor cores (fp32 accumulator), online
softmax on exp2 with fp32 running max and sum, O += P V (P in bf16, fp32 accumulation), and
writes the split's normalised fp32 output and its log2-sum-exp. Splits that start at or past the
sequence's length return at once, so only the valid prefix of each cache is read (the lengths
stay on the device: no host sync). Kernel 2, one program per (batch, query head), weighs the
valid splits' outputs by exp2(lse - max lse) and writes bf16. The split length shrinks (down to
BLOCK_N) when batch x KV heads is too small to give MIN_PROGRAMS programs, so that short batches
still spread over all SMs.

Edge cases: positions at or past the length (and past the cache) are masked on load (zero fill,
never read from DRAM) and set to -inf before the softmax; the first split always holds position
0 (lengths are >= 1), so the combine's maximum is finite. Groups that are not a power of two
(7 heads) and head dims below 16 or not a power of two are padded with masks.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_N = 64  # cache positions per inner-loop tile
SPLIT_LEN = 512  # cache positions per split (upper bound; a multiple of BLOCK_N)
MIN_PROGRAMS = 1024  # splits shrink until batch * kv_heads * splits reaches this (or BLOCK_N)
COMBINE_BLOCK = 16  # splits merged per step of the combine kernel
NUM_WARPS = 4
NUM_STAGES = 4
COMBINE_WARPS = 4
TUNABLES = {
    "BLOCK_N": [32, 64, 128],
    "SPLIT_LEN": [256, 512, 1024, 2048],
    "MIN_PROGRAMS": [512, 1024, 2048],
    "COMBINE_BLOCK": [8, 16, 32],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "COMBINE_WARPS": [2, 4, 8],
}

LOG2E = 1.4426950408889634


@triton.jit
def _decode_split(q_ptr, k_ptr, v_ptr, len_ptr, o_part_ptr, lse_part_ptr,
                  stride_qb, stride_qh, stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                  kv_heads, group, cache_len, split_len, num_splits, qk_scale,
                  HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    pid = tl.program_id(1)
    hk = pid % kv_heads
    b = pid // kv_heads
    length = tl.minimum(tl.load(len_ptr + b).to(tl.int32), cache_len)
    start = split * split_len
    if start < length:
        end = tl.minimum(start + split_len, length)
        offs_g = tl.arange(0, BLOCK_G)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d[None, :] < HEAD_DIM
        head = hk * group + offs_g  # query heads of this KV head's group
        g_ok = (offs_g[:, None] < group) & d_ok
        q_rows = q_ptr + b.to(tl.int64) * stride_qb + head.to(tl.int64) * stride_qh
        q = tl.load(q_rows[:, None] + offs_d[None, :], mask=g_ok, other=0.0)
        k_base = k_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
        v_base = v_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh

        m_i = tl.full([BLOCK_G], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)
        for start_n in range(start, end, BLOCK_N):
            kn = start_n + offs_n
            n_ok = kn < end
            kv_mask = n_ok[:, None] & d_ok
            k = tl.load(k_base + kn[:, None].to(tl.int64) * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
            s = tl.dot(q, tl.trans(k)) * qk_scale
            s = tl.where(n_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + kn[:, None].to(tl.int64) * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
            acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
            m_i = m_new

        # Partials: (batch, q_head, split, d) outputs normalised by their own sum, and log2-sum-exp.
        row = (b * kv_heads * group + head).to(tl.int64) * num_splits + split
        tl.store(o_part_ptr + row[:, None] * BLOCK_D + offs_d[None, :], acc / l_i[:, None],
                 mask=offs_g[:, None] < group)
        tl.store(lse_part_ptr + row, m_i + tl.log2(l_i), mask=offs_g < group)


@triton.jit
def _decode_combine(o_part_ptr, lse_part_ptr, len_ptr, out_ptr, stride_ob, stride_oh,
                    q_heads, cache_len, split_len, num_splits,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr,
                    ALL_SPLITS: tl.constexpr):
    pid = tl.program_id(0)  # batch * q_heads + head
    b = pid // q_heads
    h = pid % q_heads
    length = tl.minimum(tl.load(len_ptr + b).to(tl.int32), cache_len)
    valid = tl.cdiv(length, split_len)
    base = pid.to(tl.int64) * num_splits
    offs_all = tl.arange(0, ALL_SPLITS)
    lse_all = tl.load(lse_part_ptr + base + offs_all, mask=offs_all < valid, other=float("-inf"))
    lse_max = tl.max(lse_all, 0)

    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    den = tl.zeros([BLOCK_S], dtype=tl.float32)
    for s0 in range(0, valid, BLOCK_S):
        s_ok = (s0 + offs_s) < valid
        lse = tl.load(lse_part_ptr + base + s0 + offs_s, mask=s_ok, other=float("-inf"))
        w = tl.exp2(lse - lse_max)
        o = tl.load(o_part_ptr + (base + s0 + offs_s)[:, None] * BLOCK_D + offs_d[None, :], mask=s_ok[:, None],
                    other=0.0)
        acc += tl.sum(w[:, None] * o, 0)
        den += w
    out = acc / tl.sum(den, 0)
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh + offs_d,
             out.to(out_ptr.dtype.element_ty), mask=offs_d < HEAD_DIM)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def decode_attention(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                     lengths: torch.Tensor) -> torch.Tensor:
    batch, q_heads, head_dim = q.shape
    kv_heads, cache_len = k_cache.shape[1], k_cache.shape[2]
    group = q_heads // kv_heads
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k_cache.stride(-1) != 1:
        k_cache = k_cache.contiguous()
    if v_cache.stride(-1) != 1:
        v_cache = v_cache.contiguous()
    lengths = lengths.contiguous()
    out = torch.empty((batch, q_heads, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    block_d = _pow2_at_least(head_dim)
    block_n = min(BLOCK_N, _pow2_at_least(cache_len))
    split_len = max(SPLIT_LEN, block_n)
    while split_len > block_n and batch * kv_heads * triton.cdiv(cache_len, split_len) < MIN_PROGRAMS:
        split_len //= 2
    num_splits = triton.cdiv(max(cache_len, 1), split_len)
    o_part = torch.empty((batch, q_heads, num_splits, block_d), dtype=torch.float32, device=q.device)
    lse_part = torch.empty((batch, q_heads, num_splits), dtype=torch.float32, device=q.device)
    _decode_split[(num_splits, batch * kv_heads)](
        q, k_cache, v_cache, lengths, o_part, lse_part,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2),
        kv_heads, group, cache_len, split_len, num_splits, LOG2E / math.sqrt(head_dim),
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_G=_pow2_at_least(group), BLOCK_N=block_n,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    _decode_combine[(batch * q_heads,)](
        o_part, lse_part, lengths, out, out.stride(0), out.stride(1),
        q_heads, cache_len, split_len, num_splits,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_S=COMBINE_BLOCK,
        ALL_SPLITS=max(COMBINE_BLOCK, triton.next_power_of_2(num_splits)),
        num_warps=COMBINE_WARPS,
    )
    return out


class ModelNew(nn.Module):
    def forward(self, q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                lengths: torch.Tensor) -> torch.Tensor:
        return decode_attention(q, k_cache, v_cache, lengths)
