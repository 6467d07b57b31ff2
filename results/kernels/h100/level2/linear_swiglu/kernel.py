"""H100 reference kernel for level2/linear_swiglu: silu(x @ Wg^T) * (x @ Wu^T) in bf16, the gate and up
projections and the SwiGLU in one kernel.

Each program owns a BLOCK_M x BLOCK_N tile of the output and keeps two fp32 accumulators, gate and
up, for it: every K step loads the x tile once and the matching gate and up weight tiles, and issues
two bf16 wgmma products that share the x tile in shared memory (a NUM_STAGES-deep cp.async pipeline
over all three operands). The epilogue forms silu(g) * u = g * u / (1 + exp(-g)) in fp32 and rounds
once to bf16, so the (TOKENS x 2*FFN) gate/up intermediate never reaches DRAM and x is read half as
often as with two GEMMs: traffic is the minimum (x, both weights, the output once each). Programs
are ordered in groups of GROUP_M row tiles so concurrently running programs share weights and x rows
in L2. Decode-sized inputs (M <= 64 rows) are weight-streaming bound: they take 64-row tiles and
narrower DECODE_BLOCK_N column tiles so that more programs stream the weights in parallel. Ragged
edges: rows and columns past M / N are wrapped onto valid ones for the loads (never stored), K tails
are masked with zeros, the store is masked; row offsets are int64. The weights may be bf16 (as the
reference's) or fp32 (cast to bf16 on load).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 64
GROUP_M = 8
NUM_STAGES = 3
NUM_WARPS = 8
DECODE_BLOCK_N = 64
DECODE_BLOCK_K = 128
DECODE_NUM_STAGES = 4
DECODE_NUM_WARPS = 4
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [2, 3, 4],
    "NUM_WARPS": [4, 8],
    "DECODE_BLOCK_N": [32, 64, 128],
    "DECODE_BLOCK_K": [64, 128],
    "DECODE_NUM_STAGES": [3, 4, 5],
    "DECODE_NUM_WARPS": [4, 8],
}


@triton.jit
def _linear_swiglu_kernel(x_ptr, g_ptr, u_ptr, y_ptr, M, N, K, stride_xm, stride_gn, stride_un, stride_ym,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    # ALIGN (ALIGN_Y): a power of two <= 8 dividing K and the operands' row strides (the output's row
    # stride), host-checked. Rewriting them as multiples of it (an identity) tells the compiler so, for
    # 16-byte cp.async loads (tl.multiple_of on scalar arguments does not reach the alignment analysis).
    K = (K // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    stride_gn = (stride_gn // ALIGN) * ALIGN
    stride_un = (stride_un // ALIGN) * ALIGN
    stride_ym = (stride_ym // ALIGN_Y) * ALIGN_Y
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)  # wrapped: loads need no row/column mask
    cols = (offs_n % N).to(tl.int64)
    a_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    g_ptrs = g_ptr + cols[None, :] * stride_gn + offs_k[:, None]
    u_ptrs = u_ptr + cols[None, :] * stride_un + offs_k[:, None]

    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        wg = tl.load(g_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        wu = tl.load(u_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc_g = tl.dot(a, wg.to(a.dtype), acc_g)
        acc_u = tl.dot(a, wu.to(a.dtype), acc_u)
        a_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K

    h = acc_g * acc_u / (1.0 + tl.exp(-acc_g))  # silu(g) * u; exp overflow gives +-0, not NaN
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, h.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Parameter((torch.randn(ffn, hidden) * hidden**-0.5).bfloat16())
        self.up = nn.Parameter((torch.randn(ffn, hidden) * hidden**-0.5).bfloat16())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        wg, wu = self.gate.detach(), self.up.detach()
        if wg.stride(-1) != 1:
            wg = wg.contiguous()
        if wu.stride(-1) != 1:
            wu = wu.contiguous()
        m, n = x2.shape[0], wg.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=x.dtype)
        if m == 0 or n == 0:
            return y.reshape(*lead, n)
        if m <= 64:  # decode: weight-streaming bound, more and narrower column tiles
            bm, bn, bk, stages, warps = 64, DECODE_BLOCK_N, DECODE_BLOCK_K, DECODE_NUM_STAGES, DECODE_NUM_WARPS
        else:
            bm, bn, bk, stages, warps = BLOCK_M, BLOCK_N, BLOCK_K, NUM_STAGES, NUM_WARPS
        align = math.gcd(8, k, x2.stride(0), wg.stride(0), wu.stride(0))
        grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
        _linear_swiglu_kernel[grid](x2, wg, wu, y, m, n, k, x2.stride(0), wg.stride(0), wu.stride(0), y.stride(0),
                                    BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, ALIGN=align,
                                    ALIGN_Y=math.gcd(8, y.stride(0)), num_warps=warps, num_stages=stages)
        return y.reshape(*lead, n)
