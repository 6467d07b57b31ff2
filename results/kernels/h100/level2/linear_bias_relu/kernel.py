"""H100 reference kernel for level2/linear_bias_relu: y = relu(x @ W^T + b) in fp32, one GEMM with the
bias and the ReLU in its epilogue.

Tiling: each program owns a BLOCK_M x BLOCK_N output tile and walks K in BLOCK_K steps through a
NUM_STAGES-deep cp.async shared-memory pipeline; programs are ordered in groups of GROUP_M row tiles
so that concurrently running programs share x rows and W columns in L2. The task's tolerance (1e-4
against a float64 reference, over K up to 8192) rules out plain TF32, so the fp32 product runs as
INPUT_PRECISION "tf32x3": each operand is split into a TF32 head and a TF32 tail and three TF32
wgmma products (tail*head, head*tail, head*head) are accumulated in fp32, which drops only the
tail*tail term (~2^-22 relative per product) and keeps the work on the tensor cores; "ieee" (fp32
FMA on the CUDA cores) is the exact alternative. Bias and ReLU are applied to the fp32 accumulator
before the single store, so the pre-activation never reaches DRAM. Ragged edges: rows and columns
past M / N are wrapped onto valid ones for the loads (never stored), K tails are masked with zeros,
the store is masked; row offsets are int64.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 128
BLOCK_K = 32
GROUP_M = 8
NUM_STAGES = 3
NUM_WARPS = 8
INPUT_PRECISION = 'tf32x3'  # repr form: the tunables tooling rewrites this line
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [2, 3, 4],
    "NUM_WARPS": [4, 8],
    "INPUT_PRECISION": ["tf32x3", "ieee"],
}


@triton.jit
def _linear_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr,
                             INPUT_PRECISION: tl.constexpr):
    # ALIGN (ALIGN_Y): a power of two <= 4 dividing K and the operands' row strides (the output's row
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
    a_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :]
    b_ptrs = w_ptr + cols[None, :] * stride_wn + offs_k[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0).to(tl.float32)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0).to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision=INPUT_PRECISION)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    y = tl.maximum(acc + bias[None, :], 0.0)
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_features, in_features) * in_features**-0.5)
        self.bias = nn.Parameter(0.5 * torch.randn(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, k = x.shape[:-1], x.shape[-1]
        x2 = x.reshape(-1, k)
        if x2.stride(-1) != 1:
            x2 = x2.contiguous()
        w = self.weight.detach()
        if w.stride(-1) != 1:
            w = w.contiguous()
        b = self.bias.detach()
        m, n = x2.shape[0], w.shape[0]
        y = torch.empty((m, n), device=x.device, dtype=x.dtype)
        if m > 0 and n > 0:
            align, align_y = math.gcd(4, k, x2.stride(0), w.stride(0)), math.gcd(4, y.stride(0))
            grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
            _linear_bias_relu_kernel[grid](x2, w, b, y, m, n, k, x2.stride(0), w.stride(0), y.stride(0),
                                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                                           ALIGN=align, ALIGN_Y=align_y, INPUT_PRECISION=INPUT_PRECISION,
                                           num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y.reshape(*lead, n)
