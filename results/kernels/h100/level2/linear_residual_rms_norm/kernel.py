"""H100 reference kernel for level2/linear_residual_rms_norm: total = attn_out @ Wo^T + residual, then
normed = RMSNorm(total) * w, in bf16, returning (normed, total).

Two kernels. (1) A grouped-tile GEMM (BLOCK_M x BLOCK_N tiles, bf16 wgmma with an fp32 accumulator,
NUM_STAGES-deep cp.async pipeline, GROUP_M row tiles per group for L2 reuse) whose epilogue adds
the residual tile and stores `total` in bf16: the projection's output never reaches DRAM on its own.
(2) A light row kernel, one program per row: it reads the row of `total` once into registers
(NORM_BLOCK >= HIDDEN; wider rows take a two-sweep loop), forms mean(total^2) in fp32 and writes
bf16(total * rsqrt(mean + 1e-6) * w). Why not normalise inside the GEMM: the norm needs the whole row,
and a program owning full rows (HIDDEN = 4096-8192 columns) would hold a 128 x 8192 fp32 tile, far
beyond registers, and give only TOKENS / BLOCK_M programs (16-64 for these shapes on 132 SMs); the
split costs one extra read of `total` (2 bytes per element, ~5% of the GEMM's time at 8192 x 4096
x 4096) and keeps the GEMM at full occupancy. The norm uses `total` as rounded to bf16, as PyTorch's
bf16 run does, so the two outputs agree. Ragged edges: rows and columns past M / N are wrapped onto
valid ones for the GEMM's loads (never stored), K tails are zero-masked, stores and the row kernel
are masked; row offsets are int64. Weights may be bf16 (as the reference's) or fp32.
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
NUM_STAGES = 4
NUM_WARPS = 8
NORM_MAX_BLOCK = 8192
NORM_NUM_WARPS = 8
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [3, 4, 5],
    "NUM_WARPS": [4, 8],
    "NORM_MAX_BLOCK": [4096, 8192, 16384],
    "NORM_NUM_WARPS": [4, 8, 16],
}
EPS = 1e-6


@triton.jit
def _linear_residual_kernel(x_ptr, w_ptr, r_ptr, t_ptr, M, N, K, stride_xm, stride_wn, stride_rm, stride_tm,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    # ALIGN (ALIGN_Y): a power of two <= 8 dividing K and the operands' row strides (the residual's and
    # output's row strides), host-checked. Rewriting them as multiples of it (an identity) tells the
    # compiler so, for 16-byte cp.async loads (tl.multiple_of on scalar arguments does not reach the
    # alignment analysis).
    K = (K // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    stride_wn = (stride_wn // ALIGN) * ALIGN
    stride_rm = (stride_rm // ALIGN_Y) * ALIGN_Y
    stride_tm = (stride_tm // ALIGN_Y) * ALIGN_Y
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
    b_ptrs = w_ptr + cols[None, :] * stride_wn + offs_k[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    m64 = offs_m.to(tl.int64)[:, None]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    res = tl.load(r_ptr + m64 * stride_rm + offs_n[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(t_ptr + m64 * stride_tm + offs_n[None, :], (acc + res).to(t_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_rows_kernel(t_ptr, w_ptr, y_ptr, N, stride_tm, stride_ym, eps,
                          BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr, ALIGN: tl.constexpr):
    # ALIGN divides N and both row strides (host-checked): stated so that rows get 16-byte accesses.
    N = (N // ALIGN) * ALIGN
    stride_tm = (stride_tm // ALIGN) * ALIGN
    stride_ym = (stride_ym // ALIGN) * ALIGN
    row = tl.program_id(0).to(tl.int64)
    t_row = t_ptr + row * stride_tm
    y_row = y_ptr + row * stride_ym
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:  # the whole row in registers: one read
        mask = cols < N
        t = tl.load(t_row + cols, mask=mask, other=0.0).to(tl.float32)
        scale = 1.0 / tl.sqrt(tl.sum(t * t, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (t * scale * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:  # rows wider than BLOCK: sum of squares, then a second sweep (an L2 hit)
        ss = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            t = tl.load(t_row + c, mask=c < N, other=0.0).to(tl.float32)
            ss += t * t
        scale = 1.0 / tl.sqrt(tl.sum(ss, axis=0) / N + eps)
        for start in range(0, N, BLOCK):
            c = start + cols
            t = tl.load(t_row + c, mask=c < N, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=c < N, other=0.0).to(tl.float32)
            tl.store(y_row + c, (t * scale * w).to(y_ptr.dtype.element_ty), mask=c < N)


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.o_proj = nn.Parameter((torch.randn(hidden, hidden) * hidden**-0.5).bfloat16())
        self.norm_weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).bfloat16())

    def forward(self, attn_out: torch.Tensor, residual: torch.Tensor):
        lead, k = attn_out.shape[:-1], attn_out.shape[-1]
        x2 = attn_out.reshape(-1, k)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        w = self.o_proj.detach()
        if w.stride(-1) != 1:
            w = w.contiguous()
        g = self.norm_weight.detach()
        m, n = x2.shape[0], w.shape[0]
        r2 = residual.reshape(-1, n)
        if r2.stride(-1) != 1:
            r2 = r2.contiguous()
        total = torch.empty((m, n), device=attn_out.device, dtype=attn_out.dtype)
        normed = torch.empty((m, n), device=attn_out.device, dtype=attn_out.dtype)
        if m > 0 and n > 0:
            align = math.gcd(8, k, x2.stride(0), w.stride(0))
            grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
            _linear_residual_kernel[grid](x2, w, r2, total, m, n, k, x2.stride(0), w.stride(0), r2.stride(0),
                                          total.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                          GROUP_M=GROUP_M, ALIGN=align, ALIGN_Y=math.gcd(8, r2.stride(0), n),
                                          num_warps=NUM_WARPS, num_stages=NUM_STAGES)
            block = min(triton.next_power_of_2(n), NORM_MAX_BLOCK)
            _rms_norm_rows_kernel[(m,)](total, g, normed, n, total.stride(0), normed.stride(0), EPS,
                                        BLOCK=block, SINGLE_PASS=block >= n, ALIGN=math.gcd(8, n),
                                        num_warps=NORM_NUM_WARPS)
        return normed.reshape(*lead, n), total.reshape(*lead, n)
