"""H100 reference kernel for level3/llama_attention: a Llama-3 attention block in bf16 (QKV
projection, rotate-half RoPE at positions 0..S-1, causal GQA attention, output projection),
every compute step in Triton: four launches, no PyTorch math.

1. `_rope_table`: the (seq, head_dim/2) fp32 cos/sin table, once per call, following the
   reference's fp32 steps (exponent 2i/d with correctly rounded division, theta^e from fp64
   exp2/log2 rounded once to fp32, correctly rounded 1/x, angle = float(s) * inv_freq, precise
   libdevice cos/sin). It is S x d floats, read from L2 by the GEMM epilogues.
2. `_gemm_nt` with ROPE: qkv = x @ Wqkv^T with one head (head_dim columns) per BLOCK_N tile, so
   the rotate-half partner of every column is in the same accumulator: the epilogue splits the
   fp32 tile into its two halves, rotates the Q and K heads ([x1 cos - x2 sin, x2 cos + x1 sin],
   V heads pass through) and rounds to bf16 once. The projected and rotated Q, K, V never take a
   separate pass over DRAM.
3. `_gqa_causal_fwd`: flash attention that reads Q, K, V straight out of the (tokens, q+2kv heads
   x d) projection buffer by strides (no transposes, no repeat_interleave: query head h uses KV
   head h // group), packs HEADS_PER_PROG query heads of a group into one tile's rows so each K/V
   tile is loaded once for them, skips key tiles above the diagonal and masks only the tiles
   crossing it, runs the online softmax on exp2 in fp32 (P in bf16 for the PV tensor-core dot),
   and writes its output as (tokens, heads x d), the layout the output projection reads.
4. `_gemm_nt` without ROPE: out = attn @ Wo^T.
Both GEMMs: BLOCK_M x BLOCK_N x BLOCK_K tiles on wgmma with fp32 accumulators, NUM_STAGES-deep
pipelined loads, GROUP_M-swizzled program order so concurrently running tiles share operands in
L2; rows and columns past the edges are wrapped onto valid ones for the loads (never stored) and
only a ragged K tail is masked. Weights may be bf16 (as created here) or fp32 (cast on load).

Edge cases: ragged sequence lengths mask K/V loads and Q/O rows past the end; every valid query
sees key 0. Short sequences shrink the attention tiles (>= 16, tl.dot's minimum); head dims below
16 or not a power of two are padded (the RoPE GEMM maps its padded columns onto real ones and
drops them on store).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

# GEMMs (both projections)
BLOCK_M = 128
BLOCK_N = 128  # output projection; the QKV projection uses one head (head_dim) per tile
BLOCK_K = 64
GROUP_M = 8
GEMM_STAGES = 4
GEMM_WARPS = 8
# attention
ATTN_BLOCK_M = 128  # rows per program: HEADS_PER_PROG heads x (ATTN_BLOCK_M / HEADS_PER_PROG) positions
ATTN_BLOCK_N = 64
HEADS_PER_PROG = 2
ATTN_STAGES = 3
ATTN_WARPS = 8
# RoPE table
TABLE_ROWS = 32
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "GEMM_STAGES": [3, 4, 5],
    "GEMM_WARPS": [4, 8],
    "ATTN_BLOCK_M": [64, 128],
    "ATTN_BLOCK_N": [32, 64, 128],
    "HEADS_PER_PROG": [1, 2, 4],
    "ATTN_STAGES": [2, 3, 4],
    "ATTN_WARPS": [4, 8],
    "TABLE_ROWS": [16, 32, 64],
}

LOG2E = 1.4426950408889634


@triton.jit
def _rope_table(cos_ptr, sin_ptr, seq_len, theta,
                HEAD_DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, TABLE_ROWS: tl.constexpr):
    offs_s = tl.program_id(0) * TABLE_ROWS + tl.arange(0, TABLE_ROWS)
    offs_i = tl.arange(0, BLOCK_HALF)
    expo = tl.math.div_rn((2 * offs_i).to(tl.float32), HEAD_DIM * 1.0)
    log2_theta = tl.log2(tl.zeros([BLOCK_HALF], dtype=tl.float64) + theta)
    power = tl.exp2(expo.to(tl.float64) * log2_theta).to(tl.float32)
    inv_freq = tl.math.div_rn(tl.full([BLOCK_HALF], 1.0, tl.float32), power)
    angle = offs_s.to(tl.float32)[:, None] * inv_freq[None, :]
    at = offs_s[:, None] * HALF + offs_i[None, :]
    mask = (offs_s[:, None] < seq_len) & (offs_i[None, :] < HALF)
    tl.store(cos_ptr + at, tl.cos(angle), mask=mask)
    tl.store(sin_ptr + at, tl.sin(angle), mask=mask)


@triton.jit
def _gemm_nt(x_ptr, w_ptr, out_ptr, cos_ptr, sin_ptr, M, N, K, num_pid_n, seq_len, rope_cols,
             stride_xm, stride_wn, stride_om,
             ROPE: tl.constexpr, HEAD_DIM: tl.constexpr, HALF: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
             EVEN_K: tl.constexpr):
    """out[M, N] = x[M, K] @ w[N, K]^T over num_pid_n column tiles. With ROPE, tile n is head n
    (BLOCK_N >= head_dim, its two halves padded to BLOCK_N / 2 each), rotated in the epilogue when
    its first column < rope_cols."""
    HALF_N: tl.constexpr = BLOCK_N // 2
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    c = tl.arange(0, BLOCK_N)
    if ROPE:
        j = c % HALF_N
        cols = pid_n * HEAD_DIM + (c // HALF_N) * HALF + j
        col_ok = j < HALF
        cols_load = pid_n * HEAD_DIM + (c // HALF_N) * HALF + j % HALF  # padded columns repeat real ones
    else:
        cols = pid_n * BLOCK_N + c
        col_ok = cols < N
        cols_load = cols % N
    rows_load = (offs_m % M).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rows_load[:, None] * stride_xm + offs_k[None, :]
    w_ptrs = w_ptr + cols_load.to(tl.int64)[:, None] * stride_wn + offs_k[None, :]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_ok = offs_k[None, :] < K - k * BLOCK_K
            a = tl.load(x_ptrs, mask=k_ok, other=0.0)
            b = tl.load(w_ptrs, mask=k_ok, other=0.0)
        acc = tl.dot(a.to(tl.bfloat16), tl.trans(b.to(tl.bfloat16)), acc)
        x_ptrs += BLOCK_K
        w_ptrs += BLOCK_K

    m_ok = offs_m < M
    if ROPE:
        x1, x2 = tl.split(tl.permute(tl.reshape(acc, (BLOCK_M, 2, HALF_N)), (0, 2, 1)))
        offs_i = tl.arange(0, HALF_N)
        pos = offs_m % seq_len
        cs_at = pos[:, None] * HALF + offs_i[None, :]
        cs_mask = m_ok[:, None] & (offs_i[None, :] < HALF)
        cos = tl.load(cos_ptr + cs_at, mask=cs_mask, other=1.0)
        sin = tl.load(sin_ptr + cs_at, mask=cs_mask, other=0.0)
        is_rope = pid_n * HEAD_DIM < rope_cols  # Q and K heads; V heads pass through unchanged
        cos = tl.where(is_rope, cos, 1.0)
        sin = tl.where(is_rope, sin, 0.0)
        y1 = x1 * cos - x2 * sin
        y2 = x2 * cos + x1 * sin
        acc = tl.reshape(tl.permute(tl.join(y1, y2), (0, 2, 1)), (BLOCK_M, BLOCK_N))
    out = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + cols[None, :]
    tl.store(out, acc.to(out_ptr.dtype.element_ty), mask=m_ok[:, None] & col_ok[None, :])


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
def _gqa_causal_fwd(qkv_ptr, o_ptr, k_col, v_col, stride_b, stride_h, stride_s, stride_ob, stride_oh, stride_os,
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
    base = qkv_ptr + b * stride_b
    k_base = base + k_col + hk.to(tl.int64) * stride_h
    v_base = base + v_col + hk.to(tl.int64) * stride_h

    rows = tl.arange(0, BLOCK_M)
    head = (hk * group + hc * HEADS_PER_PROG + rows // POS_PER_PROG).to(tl.int64)
    first = pid_m * POS_PER_PROG
    pos = first + rows % POS_PER_PROG
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = (pos[:, None] < seq_len) & (offs_d[None, :] < HEAD_DIM)
    q_rows = base + head * stride_h + pos.to(tl.int64) * stride_s
    q = tl.load(q_rows[:, None] + offs_d[None, :], mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    split = (first // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _attn_tiles(acc, l_i, m_i, q, k_base, v_base, stride_s, stride_s, 0, split,
                                pos, offs_n, offs_d, seq_len, qk_scale,
                                CAUSAL_MASK=False, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)
    acc, l_i, m_i = _attn_tiles(acc, l_i, m_i, q, k_base, v_base, stride_s, stride_s, split,
                                tl.minimum(first + POS_PER_PROG, seq_len), pos, offs_n, offs_d, seq_len, qk_scale,
                                CAUSAL_MASK=True, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)

    out = acc / l_i[:, None]
    o_rows = o_ptr + b * stride_ob + head * stride_oh + pos.to(tl.int64) * stride_os
    tl.store(o_rows[:, None] + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=row_ok)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def _gemm(x: torch.Tensor, w: torch.Tensor, out: torch.Tensor, rope=None):
    """out = x @ w^T; rope = (cos, sin, seq_len, rope_cols, head_dim) for the QKV projection."""
    m, k = x.shape
    n = w.shape[0]
    block_k = min(BLOCK_K, _pow2_at_least(k))
    if rope is None:
        cos = sin = out
        seq_len, rope_cols, head_dim, block_n = 1, 0, 1, min(BLOCK_N, _pow2_at_least(n))
        tiles_n = triton.cdiv(n, block_n)
    else:
        cos, sin, seq_len, rope_cols, head_dim = rope
        block_n = 2 * _pow2_at_least(head_dim // 2)
        tiles_n = triton.cdiv(n, head_dim)
    block_m = min(BLOCK_M, _pow2_at_least(m, 64))
    grid = (triton.cdiv(m, block_m) * tiles_n,)
    _gemm_nt[grid](
        x, w, out, cos, sin, m, n, k, tiles_n, seq_len, rope_cols, x.stride(0), w.stride(0), out.stride(0),
        ROPE=rope is not None, HEAD_DIM=head_dim, HALF=head_dim // 2,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=GROUP_M, EVEN_K=k % block_k == 0,
        num_warps=GEMM_WARPS, num_stages=GEMM_STAGES,
    )


def _heads_per_prog(group: int, block_m: int) -> int:
    hp = 1
    while hp * 2 <= HEADS_PER_PROG and group % (hp * 2) == 0 and block_m // (hp * 2) >= 16:
        hp *= 2
    return hp


class ModelNew(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.qkv = nn.Linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim, bias=False, dtype=torch.bfloat16)
        self.o = nn.Linear(q_heads * self.head_dim, hidden, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        d, hq, hkv = self.head_dim, self.q_heads, self.kv_heads
        n_qkv = (hq + 2 * hkv) * d
        tokens = batch * seq
        out = torch.empty((batch, seq, self.o.weight.shape[0]), dtype=x.dtype, device=x.device)
        if tokens == 0:
            return out
        x2 = x.reshape(tokens, hidden)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        w_qkv = self.qkv.weight.detach()
        w_o = self.o.weight.detach()
        if w_qkv.stride(-1) != 1:
            w_qkv = w_qkv.contiguous()
        if w_o.stride(-1) != 1:
            w_o = w_o.contiguous()

        half = d // 2
        cos = torch.empty((seq, half), dtype=torch.float32, device=x.device)
        sin = torch.empty((seq, half), dtype=torch.float32, device=x.device)
        _rope_table[(triton.cdiv(seq, TABLE_ROWS),)](
            cos, sin, seq, float(self.theta),
            HEAD_DIM=d, HALF=half, BLOCK_HALF=triton.next_power_of_2(half), TABLE_ROWS=TABLE_ROWS,
        )

        qkv = torch.empty((tokens, n_qkv), dtype=x.dtype, device=x.device)
        _gemm(x2, w_qkv, qkv, rope=(cos, sin, seq, (hq + hkv) * d, d))

        attn = torch.empty((tokens, hq * d), dtype=x.dtype, device=x.device)
        group = hq // hkv
        hp = _heads_per_prog(group, ATTN_BLOCK_M)
        block_m = max(16, min(ATTN_BLOCK_M, hp * triton.next_power_of_2(seq)))
        hp = min(hp, block_m // 16) if block_m >= 32 else 1
        block_n = min(ATTN_BLOCK_N, _pow2_at_least(seq))
        grid = (triton.cdiv(seq, block_m // hp), batch * hkv * (group // hp))
        _gqa_causal_fwd[grid](
            qkv, attn, hq * d, (hq + hkv) * d, seq * n_qkv, d, n_qkv, seq * hq * d, d, hq * d,
            hkv, group, seq, LOG2E / math.sqrt(d),
            HEAD_DIM=d, BLOCK_D=_pow2_at_least(d), BLOCK_M=block_m, BLOCK_N=block_n, HEADS_PER_PROG=hp,
            num_warps=ATTN_WARPS, num_stages=ATTN_STAGES,
        )

        _gemm(attn, w_o, out.view(tokens, -1))
        return out
