"""H100 reference kernel for level3/decode_attention_block: one decode step of a GQA attention
block in bf16 (QKV projection of the new token, RoPE at each sequence's position, attention over
that sequence's valid cache prefix plus the new token, output projection), every compute step
in Triton: four launches (five when the output projection splits K), no PyTorch math.

The step is memory-bound: the weights (read once) and the valid cache prefixes (read once) are
nearly all the bytes. Both projections are skinny GEMMs (M = batch) run as split-K GEMMs: a
program owns a BLOCK_M x BLOCK_N tile and a slice of K, so that there are at least MIN_PROGRAMS
programs streaming weight tiles (NUM_STAGES-deep pipelined loads, wgmma/mma with fp32
accumulators) while the small activation matrix is re-read from L2 only once per column tile;
partial sums go to a small fp32 buffer and are added in a fixed order (deterministic).

1. `_gemm_splitk`: fp32 partials of qkv = x @ Wqkv^T.
2. `_decode_attn_split` (flash-decoding): one program per (KV split, batch, KV head). It adds up
   the qkv partials of its query-head group, of the new key and of the new value, applies RoPE
   in fp32 at the sequence's position (inv_freq with the reference's fp32 roundings: correctly
   rounded 2i/d, theta^e via fp64 exp2/log2 rounded once, correctly rounded 1/x; precise
   libdevice cos/sin), and streams its split of the cache in BLOCK_N-row tiles: S = Q K^T on
   the tensor cores with the fp32 query split into bf16 hi + lo parts (two dots, so the scores
   keep fp32 accuracy; the extra math is free in a memory-bound loop), online softmax on exp2
   in fp32, O += P V. The query group forms the rows of one tile, so each K/V tile is read once
   for all of its heads. Split 0 also takes the new token (its score computed in fp32); splits
   starting at or past the sequence's cached length return at once, so only the valid prefix is
   read, and lengths never leave the device.
3. `_decode_combine`: merges the splits by their log2-sum-exp and writes the bf16 attention
   output (batch, heads x d).
4. `_gemm_splitk` (+ `_splitk_sum` when K is split): out = attn @ Wo^T in bf16.

Edge cases: cache slots at or past positions[b] are masked on load (zero fill, garbage never
enters) and set to -inf; position 0 leaves only the new token. Ragged batch, N and K edges are
wrapped (rows/columns) or masked (K tail); groups that are not a power of two and head dims below
16 are padded with masks. The weights may be bf16 (as created here) or fp32 (cast on load).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

# skinny split-K GEMMs (both projections)
GEMM_BLOCK_M = 64  # upper bound; the batch is padded to >= 16 rows
GEMM_BLOCK_N = 64
GEMM_BLOCK_K = 64
MIN_PROGRAMS = 256  # split K until the GEMM has this many programs (about 2 per SM)...
MIN_K_BLOCKS = 8  # ...while every split keeps at least this many BLOCK_K steps
GEMM_STAGES = 4
GEMM_WARPS = 4
REDUCE_BLOCK = 1024
# decode attention
BLOCK_N = 64  # cache positions per inner-loop tile
SPLIT_LEN = 512  # cache positions per split (upper bound)
MIN_SPLITS_PROGRAMS = 1024  # splits shrink until batch * kv_heads * splits reaches this (or BLOCK_N)
COMBINE_BLOCK = 16
ATTN_STAGES = 4
ATTN_WARPS = 4
TUNABLES = {
    "GEMM_BLOCK_M": [16, 32, 64],
    "GEMM_BLOCK_N": [32, 64, 128],
    "GEMM_BLOCK_K": [64, 128, 256],
    "MIN_PROGRAMS": [128, 256, 512],
    "MIN_K_BLOCKS": [4, 8, 16],
    "GEMM_STAGES": [3, 4, 5],
    "GEMM_WARPS": [4, 8],
    "REDUCE_BLOCK": [512, 1024, 2048],
    "BLOCK_N": [32, 64, 128],
    "SPLIT_LEN": [256, 512, 1024],
    "MIN_SPLITS_PROGRAMS": [512, 1024, 2048],
    "COMBINE_BLOCK": [8, 16, 32],
    "ATTN_STAGES": [2, 3, 4],
    "ATTN_WARPS": [4, 8],
}

LOG2E = 1.4426950408889634


@triton.jit
def _gemm_splitk(x_ptr, w_ptr, out_ptr, M, N, K, k_per_split, stride_xm, stride_wn, stride_os, stride_om,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr):
    """out[split, M, N] = x[M, K-slice] @ w[N, K-slice]^T (one split per program_id(1))."""
    pid_n = tl.program_id(0)
    split = tl.program_id(1)
    pid_m = tl.program_id(2)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    k_lo = split * k_per_split
    k_hi = tl.minimum(k_lo + k_per_split, K)
    rows = (offs_m % M).to(tl.int64)  # wrapped: loads need no row/column mask
    cols = (offs_n % N).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k_lo + offs_k)[None, :]
    w_ptrs = w_ptr + cols[:, None] * stride_wn + (k_lo + offs_k)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_ok = (k0 + offs_k)[None, :] < k_hi
            a = tl.load(x_ptrs, mask=k_ok, other=0.0)
            b = tl.load(w_ptrs, mask=k_ok, other=0.0)
        acc = tl.dot(a.to(tl.bfloat16), tl.trans(b.to(tl.bfloat16)), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    out = out_ptr + split.to(tl.int64) * stride_os + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _splitk_sum(part_ptr, out_ptr, n_split, numel, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < numel
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for s in range(0, n_split):
        acc += tl.load(part_ptr + s * numel + offs, mask=ok, other=0.0)
    tl.store(out_ptr + offs, acc.to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _sum_parts(ptrs, mask, n_part, part_stride):
    acc = tl.load(ptrs, mask=mask, other=0.0)
    for p in range(1, n_part):
        acc += tl.load(ptrs + p * part_stride, mask=mask, other=0.0)
    return acc


@triton.jit
def _decode_attn_split(qkv_ptr, n_part, part_stride, stride_qkv, kc_ptr, vc_ptr, pos_ptr, o_part_ptr, lse_part_ptr,
                       stride_kb, stride_kh, stride_kn, stride_vb, stride_vh, stride_vn,
                       q_heads, kv_heads, group, cache_len, split_len, num_splits, qk_scale, theta,
                       HEAD_DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_G: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    split = tl.program_id(0)
    pid = tl.program_id(1)
    hk = pid % kv_heads
    b = pid // kv_heads
    cached = tl.minimum(tl.load(pos_ptr + b).to(tl.int32), cache_len)
    start = split * split_len
    if (split == 0) | (start < cached):
        end = tl.minimum(start + split_len, cached)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        partner = (offs_d + HALF) % HEAD_DIM  # rotate-half partner lane
        sign = tl.where(offs_d < HALF, -1.0, 1.0)

        # RoPE at this sequence's position, with the reference's fp32 roundings.
        i = offs_d % HALF
        expo = tl.math.div_rn((2 * i).to(tl.float32), HEAD_DIM * 1.0)
        log2_theta = tl.log2(tl.zeros([BLOCK_D], dtype=tl.float64) + theta)
        power = tl.exp2(expo.to(tl.float64) * log2_theta).to(tl.float32)
        inv_freq = tl.math.div_rn(tl.full([BLOCK_D], 1.0, tl.float32), power)
        angle = tl.load(pos_ptr + b).to(tl.float32) * inv_freq
        cos = tl.cos(angle)
        sin = tl.sin(angle)

        row = qkv_ptr + b.to(tl.int64) * stride_qkv
        offs_g = tl.arange(0, BLOCK_G)
        g_ok = (offs_g[:, None] < group) & d_ok[None, :]
        q_at = row + ((hk * group + offs_g) * HEAD_DIM)[:, None]
        q = _sum_parts(q_at + offs_d[None, :], g_ok, n_part, part_stride)
        q_partner = _sum_parts(q_at + partner[None, :], g_ok, n_part, part_stride)
        q = q * cos[None, :] + (sign * sin)[None, :] * q_partner
        k_at = row + (q_heads + hk) * HEAD_DIM
        k_new = _sum_parts(k_at + offs_d, d_ok, n_part, part_stride)
        k_new = k_new * cos + sign * sin * _sum_parts(k_at + partner, d_ok, n_part, part_stride)
        v_new = _sum_parts(row + (q_heads + kv_heads + hk) * HEAD_DIM + offs_d, d_ok, n_part, part_stride)

        # The new token (split 0 only) seeds the running softmax state.
        first = split == 0
        s_new = tl.sum(q * k_new[None, :], 1) * qk_scale
        m_i = tl.where(first, s_new, float("-inf"))
        l_i = tl.where(first, 1.0, 0.0) + tl.zeros([BLOCK_G], dtype=tl.float32)
        acc = tl.where(first, 1.0, 0.0) * v_new[None, :] + tl.zeros([BLOCK_G, BLOCK_D], dtype=tl.float32)

        q_hi = q.to(tl.bfloat16)
        q_lo = (q - q_hi.to(tl.float32)).to(tl.bfloat16)
        offs_n = tl.arange(0, BLOCK_N)
        k_base = kc_ptr + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
        v_base = vc_ptr + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
        for start_n in range(start, end, BLOCK_N):
            kn = start_n + offs_n
            n_ok = kn < end
            kv_mask = n_ok[:, None] & d_ok[None, :]
            k = tl.load(k_base + kn[:, None].to(tl.int64) * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
            kt = tl.trans(k.to(tl.bfloat16))
            s = (tl.dot(q_hi, kt) + tl.dot(q_lo, kt)) * qk_scale
            s = tl.where(n_ok[None, :], s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            alpha = tl.exp2(m_i - m_new)
            p = tl.exp2(s - m_new[:, None])
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(v_base + kn[:, None].to(tl.int64) * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
            acc = tl.dot(p.to(tl.bfloat16), v.to(tl.bfloat16), acc * alpha[:, None])
            m_i = m_new

        head = hk * group + offs_g
        at = (b * q_heads + head).to(tl.int64) * num_splits + split
        tl.store(o_part_ptr + at[:, None] * BLOCK_D + offs_d[None, :], acc / l_i[:, None],
                 mask=offs_g[:, None] < group)
        tl.store(lse_part_ptr + at, m_i + tl.log2(l_i), mask=offs_g < group)


@triton.jit
def _decode_combine(o_part_ptr, lse_part_ptr, pos_ptr, out_ptr, stride_ob, q_heads, cache_len, split_len, num_splits,
                    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_S: tl.constexpr, ALL_SPLITS: tl.constexpr):
    pid = tl.program_id(0)  # batch * q_heads + head
    b = pid // q_heads
    h = pid % q_heads
    cached = tl.minimum(tl.load(pos_ptr + b).to(tl.int32), cache_len)
    valid = tl.maximum(tl.cdiv(cached, split_len), 1)  # split 0 always holds the new token
    base = pid.to(tl.int64) * num_splits
    offs_all = tl.arange(0, ALL_SPLITS)
    lse_max = tl.max(tl.load(lse_part_ptr + base + offs_all, mask=offs_all < valid, other=float("-inf")), 0)
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    acc = tl.zeros([BLOCK_D], dtype=tl.float32)
    den = tl.zeros([BLOCK_S], dtype=tl.float32)
    for s0 in range(0, valid, BLOCK_S):
        s_ok = (s0 + offs_s) < valid
        w = tl.exp2(tl.load(lse_part_ptr + base + s0 + offs_s, mask=s_ok, other=float("-inf")) - lse_max)
        o = tl.load(o_part_ptr + (base + s0 + offs_s)[:, None] * BLOCK_D + offs_d[None, :], mask=s_ok[:, None],
                    other=0.0)
        acc += tl.sum(w[:, None] * o, 0)
        den += w
    out = acc / tl.sum(den, 0)
    tl.store(out_ptr + b.to(tl.int64) * stride_ob + h * HEAD_DIM + offs_d, out.to(out_ptr.dtype.element_ty),
             mask=offs_d < HEAD_DIM)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def _gemm_parts(x: torch.Tensor, w: torch.Tensor, out_dtype: torch.dtype):
    """Split-K GEMM: (parts, n_split) with parts[s] = x @ w[:, K-slice s]^T, fp32 when n_split > 1
    (or when out_dtype is fp32), out_dtype otherwise."""
    m, k = x.shape
    n = w.shape[0]
    block_m = min(GEMM_BLOCK_M, _pow2_at_least(m))
    block_n = min(GEMM_BLOCK_N, _pow2_at_least(n))
    block_k = min(GEMM_BLOCK_K, _pow2_at_least(k))
    tiles_m, tiles_n = triton.cdiv(m, block_m), triton.cdiv(n, block_n)
    k_blocks = triton.cdiv(k, block_k)
    split = 1
    while tiles_m * tiles_n * split < MIN_PROGRAMS and k_blocks // (2 * split) >= MIN_K_BLOCKS:
        split *= 2
    blocks_per_split = triton.cdiv(k_blocks, split)
    split = triton.cdiv(k_blocks, blocks_per_split)
    dtype = out_dtype if split == 1 else torch.float32
    parts = torch.empty((split, m, n), dtype=dtype, device=x.device)
    _gemm_splitk[(tiles_n, split, tiles_m)](
        x, w, parts, m, n, k, blocks_per_split * block_k, x.stride(0), w.stride(0), parts.stride(0), parts.stride(1),
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, EVEN_K=k % block_k == 0,
        num_warps=GEMM_WARPS, num_stages=GEMM_STAGES,
    )
    return parts, split


class ModelNew(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.qkv = nn.Parameter(torch.empty((q_heads + 2 * kv_heads) * self.head_dim, hidden, dtype=torch.bfloat16))
        self.o = nn.Parameter(torch.empty(hidden, q_heads * self.head_dim, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                positions: torch.Tensor) -> torch.Tensor:
        batch = x.shape[0]
        d, hq, hkv = self.head_dim, self.q_heads, self.kv_heads
        group = hq // hkv
        cache_len = k_cache.shape[2]
        if batch == 0:
            return torch.empty((0, self.o.shape[0]), dtype=x.dtype, device=x.device)
        if x.stride(-1) != 1:
            x = x.contiguous()
        if k_cache.stride(-1) != 1:
            k_cache = k_cache.contiguous()
        if v_cache.stride(-1) != 1:
            v_cache = v_cache.contiguous()
        positions = positions.contiguous()
        w_qkv, w_o = self.qkv.detach(), self.o.detach()
        if w_qkv.stride(-1) != 1:
            w_qkv = w_qkv.contiguous()
        if w_o.stride(-1) != 1:
            w_o = w_o.contiguous()

        # 1. QKV projection (fp32 partial sums, added up by the attention kernel).
        qkv_parts, n_part = _gemm_parts(x, w_qkv, torch.float32)

        # 2. split-KV attention with RoPE and the new token.
        block_d = _pow2_at_least(d)
        block_n = min(BLOCK_N, _pow2_at_least(cache_len))
        split_len = max(SPLIT_LEN, block_n)
        while split_len > block_n and batch * hkv * triton.cdiv(cache_len, split_len) < MIN_SPLITS_PROGRAMS:
            split_len //= 2
        num_splits = triton.cdiv(max(cache_len, 1), split_len)
        o_part = torch.empty((batch, hq, num_splits, block_d), dtype=torch.float32, device=x.device)
        lse_part = torch.empty((batch, hq, num_splits), dtype=torch.float32, device=x.device)
        _decode_attn_split[(num_splits, batch * hkv)](
            qkv_parts, n_part, qkv_parts.stride(0), qkv_parts.stride(1), k_cache, v_cache, positions, o_part, lse_part,
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), v_cache.stride(0), v_cache.stride(1),
            v_cache.stride(2), hq, hkv, group, cache_len, split_len, num_splits, LOG2E / math.sqrt(d),
            float(self.theta),
            HEAD_DIM=d, HALF=d // 2, BLOCK_D=block_d, BLOCK_G=_pow2_at_least(group), BLOCK_N=block_n,
            num_warps=ATTN_WARPS, num_stages=ATTN_STAGES,
        )
        attn = torch.empty((batch, hq * d), dtype=x.dtype, device=x.device)
        _decode_combine[(batch * hq,)](
            o_part, lse_part, positions, attn, attn.stride(0), hq, cache_len, split_len, num_splits,
            HEAD_DIM=d, BLOCK_D=block_d, BLOCK_S=COMBINE_BLOCK,
            ALL_SPLITS=max(COMBINE_BLOCK, triton.next_power_of_2(num_splits)),
        )

        # 3. output projection.
        o_parts, n_split = _gemm_parts(attn, w_o, x.dtype)
        if n_split == 1:
            return o_parts[0]
        out = torch.empty((batch, self.o.shape[0]), dtype=x.dtype, device=x.device)
        numel = out.numel()
        _splitk_sum[(triton.cdiv(numel, REDUCE_BLOCK),)](o_parts, out, n_split, numel, BLOCK=REDUCE_BLOCK)
        return out
