"""H100 reference kernel for level2/layer_norm_linear_fp16: y = LayerNorm(x) @ W^T + b in fp16, the
normalisation applied while the GEMM loads its A tiles.

Two kernels. (1) A statistics pre-pass, one program per row: it reads the row once (NORM_BLOCK >=
HIDDEN, in registers; wider rows take a chunked loop) and writes its mean and 1/sqrt(var + 1e-5)
in fp32 (8 bytes per row; the two-sweep variance avoids E[x^2] - E[x]^2 cancellation). (2) A grouped
tile GEMM (BLOCK_M x BLOCK_N tiles, NUM_STAGES-deep cp.async pipeline, GROUP_M row tiles per group
for L2 reuse): each K step takes the raw x tile from shared memory, forms
fp16((x - mean) * rstd * gamma + beta) in fp32 registers (the reference's rounding of h to the input
dtype) and feeds it to wgmma as the register A operand, with the W tile from shared memory; the
bias is added to the fp32 accumulator in the epilogue. The normalised activation h never reaches
DRAM: the traffic is x twice (stats, GEMM) plus W and y once, against x, W, h written and h read
again for an unfused norm. The normalisation costs BLOCK_M x BLOCK_K FMAs per K step against
BLOCK_M x BLOCK_N x BLOCK_K tensor-core MACs. Ragged edges: rows and columns past M / N are wrapped
onto valid ones for the loads (never stored), K tails are zero-masked (gamma and beta load as 0
there, so the A tail is exactly 0), the store is masked; row offsets are int64. Parameters may be
fp16 (as the reference's) or fp32.
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
EPS = 1e-5


@triton.jit
def _row_stats_kernel(x_ptr, stats_ptr, N, stride_xm, eps, BLOCK: tl.constexpr, SINGLE_PASS: tl.constexpr,
                      ALIGN: tl.constexpr):
    # ALIGN divides N and the row stride (host-checked): stated so that rows get 16-byte loads.
    N = (N // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_xm
    cols = tl.arange(0, BLOCK)
    if SINGLE_PASS:  # the whole row in registers: one read
        x = tl.load(x_row + cols, mask=cols < N, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N
        d = tl.where(cols < N, x - mean, 0.0)
        var = tl.sum(d * d, axis=0) / N
    else:  # rows wider than BLOCK: mean, then the centred sum of squares (second sweep from L2)
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            acc += tl.load(x_row + c, mask=c < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        acc = tl.zeros((BLOCK,), dtype=tl.float32)
        for start in range(0, N, BLOCK):
            c = start + cols
            x = tl.load(x_row + c, mask=c < N, other=0.0).to(tl.float32)
            d = tl.where(c < N, x - mean, 0.0)
            acc += d * d
        var = tl.sum(acc, axis=0) / N
    tl.store(stats_ptr + 2 * row, mean)
    tl.store(stats_ptr + 2 * row + 1, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _ln_linear_kernel(x_ptr, stats_ptr, g_ptr, beta_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn,
                      stride_ym, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    # ALIGN (ALIGN_Y): a power of two <= 8 dividing K and the operands' row strides (the output's row
    # stride), host-checked. Rewriting them as multiples of it (an identity) tells the compiler so, for
    # 16-byte cp.async loads (tl.multiple_of on scalar arguments does not reach the alignment analysis).
    K = (K // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    stride_wn = (stride_wn // ALIGN) * ALIGN
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
    mean = tl.load(stats_ptr + 2 * rows)[:, None]
    rstd = tl.load(stats_ptr + 2 * rows + 1)[:, None]
    a_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    b_ptrs = w_ptr + cols[None, :] * stride_wn + offs_k[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        kmask = offs_k < k_left
        x = tl.load(a_ptrs, mask=kmask[None, :], other=0.0).to(tl.float32)
        gamma = tl.load(g_ptr + k * BLOCK_K + offs_k, mask=kmask, other=0.0).to(tl.float32)
        beta = tl.load(beta_ptr + k * BLOCK_K + offs_k, mask=kmask, other=0.0).to(tl.float32)
        h = ((x - mean) * rstd * gamma[None, :] + beta[None, :]).to(x_ptr.dtype.element_ty)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        acc = tl.dot(h, b.to(h.dtype), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    y = acc + bias[None, :]
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, hidden: int, out_features: int):
        super().__init__()
        self.ln_weight = nn.Parameter((1.0 + 0.1 * torch.randn(hidden)).half())
        self.ln_bias = nn.Parameter((0.1 * torch.randn(hidden)).half())
        self.weight = nn.Parameter((torch.randn(out_features, hidden) * hidden**-0.5).half())
        self.bias = nn.Parameter((0.1 * torch.randn(out_features)).half())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        w = self.weight.detach()
        if w.stride(-1) != 1:
            w = w.contiguous()
        m, n = x2.shape[0], w.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=x.dtype)
        if m == 0 or n == 0:
            return y.reshape(*lead, n)
        stats = torch.empty((m, 2), device=x.device, dtype=torch.float32)
        block = min(triton.next_power_of_2(k), NORM_MAX_BLOCK)
        _row_stats_kernel[(m,)](x2, stats, k, x2.stride(0), EPS, BLOCK=block, SINGLE_PASS=block >= k,
                                ALIGN=math.gcd(8, k, x2.stride(0)), num_warps=NORM_NUM_WARPS)
        align = math.gcd(8, k, x2.stride(0), w.stride(0))
        grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
        _ln_linear_kernel[grid](x2, stats, self.ln_weight.detach(), self.ln_bias.detach(), w, self.bias.detach(), y,
                                m, n, k, x2.stride(0), w.stride(0), y.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, ALIGN=align, ALIGN_Y=math.gcd(8, y.stride(0)),
                                num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y.reshape(*lead, n)
