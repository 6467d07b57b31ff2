"""H100 reference kernel for level2/qk_norm_rope: per-head RMSNorm of queries and keys (eps
1e-6, fp32, learned weight) followed by rotate-half RoPE at int64 positions, in one Triton launch
that reads Q and K once and writes them once (the reference makes four fp32 passes).

Grid: (token blocks, head blocks of Q then of K). A program owns BLOCK_T tokens x BLOCK_H heads
and loads them as two (BLOCK_T, BLOCK_H, head_dim / 2) tiles, the first and second halves of
each head, so the rotation pairs x1[i] with x2[i] in registers with no shuffle; for a token the
BLOCK_H heads are contiguous in memory (wide, coalesced accesses). Per head: the sum of squares
of both halves in fp32, x * rsqrt(mean + 1e-6) * w, then [x1 cos - x2 sin, x2 cos + x1 sin],
stored as bf16. The (cos, sin) table is built once per program for its BLOCK_T tokens and
shared by all its heads: inv_freq follows the reference's fp32 steps (exponent 2i/d with
correctly rounded division; theta^e from fp64 exp2/log2, rounded once to fp32 as a correctly
rounded powf gives it; 1/x correctly rounded), the angle is float(pos) * inv_freq in fp32, and
cos/sin use the precise libdevice routines with full range reduction (positions up to 32768
rad are fine). DRAM traffic is the minimum: Q, K and positions in, Q and K out.

Edge cases: token counts and head counts that are not multiples of the blocks are masked; head
dims whose half is not a power of two are padded with masks (the padded lanes load 0 and add
nothing to the sum of squares). The weights may be fp32 or bf16.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_T = 8  # tokens per program
BLOCK_H = 8  # heads per program
NUM_WARPS = 8
TUNABLES = {"BLOCK_T": [4, 8, 16], "BLOCK_H": [4, 8, 16], "NUM_WARPS": [2, 4, 8]}

EPS = 1e-6


@triton.jit
def _norm_rope_heads(x_ptr, o_ptr, w_ptr, stride_xt, stride_xh, stride_ot, stride_oh, n_heads, h0,
                     offs_t, t_ok, cos, sin, eps,
                     HEAD_DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    offs_h = h0 + tl.arange(0, BLOCK_H)
    offs_i = tl.arange(0, BLOCK_HALF)
    i_ok = offs_i < HALF
    mask = t_ok[:, None, None] & (offs_h[None, :, None] < n_heads) & i_ok[None, None, :]
    t64 = offs_t.to(tl.int64)[:, None, None]
    h64 = offs_h.to(tl.int64)[None, :, None]
    x_at = x_ptr + t64 * stride_xt + h64 * stride_xh + offs_i[None, None, :]
    x1 = tl.load(x_at, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_at + HALF, mask=mask, other=0.0).to(tl.float32)
    w1 = tl.load(w_ptr + offs_i, mask=i_ok, other=0.0).to(tl.float32)[None, None, :]
    w2 = tl.load(w_ptr + HALF + offs_i, mask=i_ok, other=0.0).to(tl.float32)[None, None, :]

    mean_sq = (tl.sum(x1 * x1, 2) + tl.sum(x2 * x2, 2)) / HEAD_DIM
    r = tl.rsqrt(mean_sq + eps)[:, :, None]
    n1 = x1 * r * w1
    n2 = x2 * r * w2
    c = cos[:, None, :]
    s = sin[:, None, :]
    y1 = n1 * c - n2 * s
    y2 = n2 * c + n1 * s
    o_at = o_ptr + t64 * stride_ot + h64 * stride_oh + offs_i[None, None, :]
    tl.store(o_at, y1.to(o_ptr.dtype.element_ty), mask=mask)
    tl.store(o_at + HALF, y2.to(o_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _qk_norm_rope(q_ptr, k_ptr, qo_ptr, ko_ptr, qw_ptr, kw_ptr, pos_ptr,
                  stride_qt, stride_qh, stride_kt, stride_kh, stride_qot, stride_qoh, stride_kot, stride_koh,
                  tokens, q_heads, kv_heads, theta, eps,
                  HEAD_DIM: tl.constexpr, HALF: tl.constexpr, BLOCK_HALF: tl.constexpr,
                  BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)
    offs_t = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    t_ok = offs_t < tokens

    # inv_freq = 1 / theta^(2i/d) with the reference's fp32 roundings.
    offs_i = tl.arange(0, BLOCK_HALF)
    expo = tl.math.div_rn((2 * offs_i).to(tl.float32), HEAD_DIM * 1.0)
    log2_theta = tl.log2(tl.zeros([BLOCK_HALF], dtype=tl.float64) + theta)
    power = tl.exp2(expo.to(tl.float64) * log2_theta).to(tl.float32)
    inv_freq = tl.math.div_rn(tl.full([BLOCK_HALF], 1.0, tl.float32), power)
    pos = tl.load(pos_ptr + offs_t, mask=t_ok, other=0).to(tl.float32)
    angle = pos[:, None] * inv_freq[None, :]
    cos = tl.cos(angle)
    sin = tl.sin(angle)

    q_blocks = tl.cdiv(q_heads, BLOCK_H)
    if pid_h < q_blocks:
        _norm_rope_heads(q_ptr, qo_ptr, qw_ptr, stride_qt, stride_qh, stride_qot, stride_qoh, q_heads,
                         pid_h * BLOCK_H, offs_t, t_ok, cos, sin, eps,
                         HEAD_DIM=HEAD_DIM, HALF=HALF, BLOCK_HALF=BLOCK_HALF, BLOCK_H=BLOCK_H)
    else:
        _norm_rope_heads(k_ptr, ko_ptr, kw_ptr, stride_kt, stride_kh, stride_kot, stride_koh, kv_heads,
                         (pid_h - q_blocks) * BLOCK_H, offs_t, t_ok, cos, sin, eps,
                         HEAD_DIM=HEAD_DIM, HALF=HALF, BLOCK_HALF=BLOCK_HALF, BLOCK_H=BLOCK_H)


def qk_norm_rope(q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor, q_weight: torch.Tensor,
                 k_weight: torch.Tensor, theta: float):
    tokens, q_heads, head_dim = q.shape
    kv_heads = k.shape[1]
    if q.stride(-1) != 1:
        q = q.contiguous()
    if k.stride(-1) != 1:
        k = k.contiguous()
    positions = positions.contiguous()
    q_out = torch.empty((tokens, q_heads, head_dim), dtype=q.dtype, device=q.device)
    k_out = torch.empty((tokens, kv_heads, head_dim), dtype=k.dtype, device=k.device)
    if tokens == 0 or head_dim == 0:
        return q_out, k_out
    half = head_dim // 2
    block_h = min(BLOCK_H, triton.next_power_of_2(max(q_heads, kv_heads)))
    grid = (triton.cdiv(tokens, BLOCK_T), triton.cdiv(q_heads, block_h) + triton.cdiv(kv_heads, block_h))
    _qk_norm_rope[grid](
        q, k, q_out, k_out, q_weight.contiguous(), k_weight.contiguous(), positions,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1),
        q_out.stride(0), q_out.stride(1), k_out.stride(0), k_out.stride(1),
        tokens, q_heads, kv_heads, float(theta), EPS,
        HEAD_DIM=head_dim, HALF=half, BLOCK_HALF=triton.next_power_of_2(half),
        BLOCK_T=BLOCK_T, BLOCK_H=block_h, num_warps=NUM_WARPS,
    )
    return q_out, k_out


class ModelNew(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        self.theta = theta
        self.q_weight = nn.Parameter(torch.ones(head_dim))
        self.k_weight = nn.Parameter(torch.ones(head_dim))

    def forward(self, q: torch.Tensor, k: torch.Tensor, positions: torch.Tensor):
        return qk_norm_rope(q, k, positions, self.q_weight.detach(), self.k_weight.detach(), self.theta)
