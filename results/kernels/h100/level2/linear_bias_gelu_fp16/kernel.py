"""H100 reference kernel for level2/linear_bias_gelu_fp16: y = gelu_tanh(x @ W^T + b) in fp16, one GEMM
with the bias and the activation in its epilogue.

Tiling: each program owns a BLOCK_M x BLOCK_N output tile and walks K in BLOCK_K steps; Triton lowers
the fp16 `tl.dot` to Hopper wgmma with an fp32 accumulator and software-pipelines the operand loads
over NUM_STAGES shared-memory buffers. Programs are ordered in groups of GROUP_M row tiles (all of a
group's row tiles run against one column tile before moving on), so the x rows and W columns that
concurrently running programs share stay in L2 and DRAM sees each operand close to once. The epilogue
adds the bias and applies gelu_tanh(z) = z * sigmoid(2u), u = sqrt(2/pi) (z + 0.044715 z^3), in fp32
on the accumulator, then rounds to fp16 once: the (TOKENS x OUT) pre-activation never reaches DRAM,
so the traffic is the GEMM's minimum (read x, W, b once each, write y once) and the work is on the
tensor cores. Ragged edges: rows and columns past M / N are wrapped onto valid ones for the loads
(their results are never stored), K tails are masked with zeros, and the store is masked. Row
offsets are int64. The weight may be fp16 (as the reference's) or fp32 (cast to fp16 on load).
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
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [3, 4, 5],
    "NUM_WARPS": [4, 8],
}


@triton.jit
def _linear_bias_gelu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, stride_xm, stride_wn, stride_ym,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                             GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_Y: tl.constexpr):
    # ALIGN (ALIGN_Y): a power of two <= 8 dividing K and the operands' row strides (the output's row
    # stride), host-checked. Rewriting them as multiples of it (an identity) tells the compiler so: rows
    # whose length is a multiple of 8 but not of 16 still get 16-byte cp.async loads and a pipelined K
    # loop (tl.multiple_of on scalar arguments does not reach Triton's alignment analysis).
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
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    u = 0.7978845608028654 * (z + 0.044715 * z * z * z)
    y = z / (1.0 + tl.exp(-2.0 * u))  # 0.5 z (1 + tanh u) = z sigmoid(2u); exp overflow gives -0, not NaN
    out = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(out_features, in_features) * in_features**-0.5).half())
        self.bias = nn.Parameter((0.5 * torch.randn(out_features)).half())

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
            align, align_y = math.gcd(8, k, x2.stride(0), w.stride(0)), math.gcd(8, y.stride(0))
            grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
            _linear_bias_gelu_kernel[grid](x2, w, b, y, m, n, k, x2.stride(0), w.stride(0), y.stride(0),
                                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                                           ALIGN=align, ALIGN_Y=align_y,
                                           num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return y.reshape(*lead, n)
