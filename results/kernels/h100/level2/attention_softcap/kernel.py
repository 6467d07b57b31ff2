"""H100 reference kernel for level2/attention_softcap: causal attention with Gemma-2 logit
soft-capping, softmax(cap * tanh(Q K^T / (sqrt(d) * cap)) + causal mask) V, in bf16, as a
flash-attention forward pass in Triton with the cap applied inside the online softmax.

One program per (BLOCK_M query rows, batch*head); K and V stream through in BLOCK_N-row tiles
(NUM_STAGES-deep pipelined loads) and the scores never reach DRAM (the reference writes and
re-reads a seq x seq fp32 matrix per head). Per tile: S = Q K^T on the tensor cores (wgmma, fp32
accumulator); the cap in fp32, tanh(x) = 1 - 2 / (2^(2 x log2 e) + 1) (exact limits +-1 for
large |x|, absolute error ~1e-7, so ~1e-5 on the capped logit), with cap * log2(e) folded into
the scale so the online softmax runs on exp2; running max and sum in fp32, O rescaled and
updated with P V (P in bf16, fp32 accumulation). Key tiles wholly below the diagonal run
without a mask, only the tiles crossing it are masked, tiles above it are skipped: half the
FLOPs of dense attention. Heaviest query tiles are launched first. For head_dim 256 the key
tile is halved (BLOCK_N // 2) so the Q tile plus NUM_STAGES K/V buffers fit in shared memory.

Edge cases: ragged sequence lengths mask K/V loads past the end (zero fill) and the rows past
the end on the Q load and O store; every valid row sees key 0, so no row's sum is zero.
Sequences shorter than a tile shrink the tiles (to at least 16, tl.dot's minimum); head dims
that are not a power of two, or below 16, are padded with masked loads.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # query rows per program
BLOCK_N = 64  # keys per inner-loop tile at head_dim <= 128 (halved above)
NUM_WARPS = 8
NUM_STAGES = 3
TUNABLES = {"BLOCK_M": [64, 128], "BLOCK_N": [32, 64, 128], "NUM_WARPS": [4, 8], "NUM_STAGES": [2, 3, 4]}

LOG2E = 1.4426950408889634


@triton.jit
def _softcap_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, lo, hi, offs_m, offs_n, offs_d,
                   seq_len, in_scale, out_scale, CAUSAL_MASK: tl.constexpr, HEAD_DIM: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    d_ok = offs_d[None, :] < HEAD_DIM
    for start_n in range(lo, hi, BLOCK_N):
        kn = start_n + offs_n
        kv_mask = d_ok
        if CAUSAL_MASK:
            kv_mask = (kn[:, None] < seq_len) & d_ok
        k = tl.load(k_base + kn[:, None].to(tl.int64) * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        # x = q.k / (sqrt(d) cap); logit (in log2 units) = cap log2(e) tanh(x)
        e = tl.exp2(tl.dot(q, tl.trans(k)) * in_scale)  # exp(2x)
        s = (1.0 - 2.0 / (e + 1.0)) * out_scale
        if CAUSAL_MASK:
            s = tl.where(offs_m[:, None] >= kn[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + kn[:, None].to(tl.int64) * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None])
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _softcap_causal_fwd(q_ptr, k_ptr, v_ptr, o_ptr,
                        stride_qb, stride_qh, stride_qm, stride_kb, stride_kh, stride_kn,
                        stride_vb, stride_vh, stride_vn, stride_ob, stride_oh, stride_om,
                        heads, seq_len, in_scale, out_scale,
                        HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # heaviest query tiles first
    pid_bh = tl.program_id(1)
    b = (pid_bh // heads).to(tl.int64)
    h = (pid_bh % heads).to(tl.int64)
    k_base = k_ptr + b * stride_kb + h * stride_kh
    v_base = v_ptr + b * stride_vb + h * stride_vh

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    row_ok = (offs_m[:, None] < seq_len) & (offs_d[None, :] < HEAD_DIM)
    q_rows = q_ptr + b * stride_qb + h * stride_qh + offs_m.to(tl.int64) * stride_qm
    q = tl.load(q_rows[:, None] + offs_d[None, :], mask=row_ok, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    first = pid_m * BLOCK_M
    split = (first // BLOCK_N) * BLOCK_N
    acc, l_i, m_i = _softcap_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, 0, split,
                                   offs_m, offs_n, offs_d, seq_len, in_scale, out_scale,
                                   CAUSAL_MASK=False, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)
    acc, l_i, m_i = _softcap_tiles(acc, l_i, m_i, q, k_base, v_base, stride_kn, stride_vn, split,
                                   tl.minimum(first + BLOCK_M, seq_len), offs_m, offs_n, offs_d, seq_len,
                                   in_scale, out_scale, CAUSAL_MASK=True, HEAD_DIM=HEAD_DIM, BLOCK_N=BLOCK_N)

    out = acc / l_i[:, None]
    o_rows = o_ptr + b * stride_ob + h * stride_oh + offs_m.to(tl.int64) * stride_om
    tl.store(o_rows[:, None] + offs_d[None, :], out.to(o_ptr.dtype.element_ty), mask=row_ok)


def _pow2_at_least(n: int, floor: int = 16) -> int:
    return max(floor, triton.next_power_of_2(n))


def softcap_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, softcap: float) -> torch.Tensor:
    batch, heads, seq_len, head_dim = q.shape
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    if v.stride(-1) != 1:
        v = v.contiguous()
    out = torch.empty((batch, heads, seq_len, head_dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    block_d = _pow2_at_least(head_dim)
    block_m = min(BLOCK_M, _pow2_at_least(seq_len))
    block_n = BLOCK_N if block_d <= 128 else max(16, BLOCK_N // 2)
    block_n = min(block_n, _pow2_at_least(seq_len))
    grid = (triton.cdiv(seq_len, block_m), batch * heads)
    _softcap_causal_fwd[grid](
        q, k, v, out,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1), out.stride(2),
        heads, seq_len, 2.0 * LOG2E / (math.sqrt(head_dim) * softcap), softcap * LOG2E,
        HEAD_DIM=head_dim, BLOCK_D=block_d, BLOCK_M=block_m, BLOCK_N=block_n,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return out


class ModelNew(nn.Module):
    def __init__(self, softcap: float):
        super().__init__()
        self.softcap = softcap

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return softcap_attention(q, k, v, float(self.softcap))
