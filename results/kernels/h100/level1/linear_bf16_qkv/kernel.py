"""H100 reference kernel for level1/linear_bf16_qkv: the fused QKV projection y = x @ W^T of a GQA
decoder, x (TOKENS, HIDDEN) and W ((Q_HEADS + 2 KV_HEADS) HEAD_DIM, HIDDEN), in bf16 with fp32
accumulation.

W is read in its stored (out, hidden) layout: both operands are K-major, which wgmma takes from
shared memory directly, so no transposed copy of the weight is made. One program per
BLOCK_M x BLOCK_N tile of y (128 x 256, BLOCK_K 64, 8 warps = two warpgroups), NUM_STAGES
K-slices of x and W in flight through cp.async (3 x 48 KiB of shared memory). Programs run in
grouped (swizzled) order: GROUP_M tile-rows of tokens walk across the output features together,
so each band of x and of W comes from DRAM about once and is then reused from L2, keeping
traffic near the minimum 2 (T H + O H + T O) bytes while the tensor cores stay busy.

Edges: the K loop is unmasked over whole BLOCK_K slices with one masked step for the remainder.
Rows past TOKENS and features past O wrap onto valid ones for the loads (both are the strided,
non-contiguous dimension, so 16-byte vectors along K survive) and the masked store drops them.
Row strides reach the kernel in units of 8 elements, which tells Triton every row is 16-byte
aligned; an operand whose row stride is not a multiple of 8 (or is not K-contiguous) is first
copied by a Triton kernel into a padded buffer. The weight may be bf16 or fp32 (converted to
bf16 in registers). Offsets are int64. Empty inputs return empty or zero outputs.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 256
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
COPY_BLOCK_R = 16
COPY_BLOCK_C = 256
TUNABLES = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "COPY_BLOCK_C": [128, 256, 512],
}


@triton.jit
def _linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                   stride_xm8, stride_xk, stride_wn8, stride_wk, stride_ym_u, stride_yn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, Y_UNIT: tl.constexpr):
    # Strides ending in 8 come in units of 8 elements: rows start on 16-byte boundaries.
    stride_xm = stride_xm8 * 8
    stride_wn = stride_wn8 * 8
    stride_ym = stride_ym_u * Y_UNIT

    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % rows_in_group
    pid_n = (pid % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)
    feats = (offs_n % N).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + offs_k[None, :] * stride_xk
    w_ptrs = w_ptr + feats[None, :] * stride_wn + offs_k[:, None] * stride_wk  # (BLOCK_K, BLOCK_N) view of W^T

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_full = K // BLOCK_K
    for _ in range(0, k_full):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs).to(x_ptr.dtype.element_ty)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    k_left = K - k_full * BLOCK_K
    if k_left > 0:
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0).to(x_ptr.dtype.element_ty)
        acc = tl.dot(a, b, acc)

    y_ptrs = y_ptr + offs_m.to(tl.int64)[:, None] * stride_ym + offs_n.to(tl.int64)[None, :] * stride_yn
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(y_ptrs, acc.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_rows_kernel(src_ptr, dst_ptr, R, C, C_pad, stride_sr, stride_sc, stride_dr,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # dst[:, :C] = src, dst[:, C:C_pad] = 0
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    r64 = rows.to(tl.int64)[:, None]
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    v = tl.load(src_ptr + r64 * stride_sr + cols[None, :].to(tl.int64) * stride_sc, mask=inside, other=0.0)
    tl.store(dst_ptr + r64 * stride_dr + cols[None, :], v, mask=(rows[:, None] < R) & (cols[None, :] < C_pad))


def _k_major(t: torch.Tensor) -> torch.Tensor:
    """t (R, K) itself when its rows are contiguous and 16-byte aligned, else a padded copy."""
    R, C = t.shape
    if t.stride(1) == 1 and t.stride(0) % 8 == 0 and t.data_ptr() % 16 == 0:
        return t
    c_pad = triton.cdiv(max(C, 1), 16) * 16
    buf = torch.empty((R, c_pad), device=t.device, dtype=t.dtype)
    if R:
        grid = (triton.cdiv(R, COPY_BLOCK_R), triton.cdiv(c_pad, COPY_BLOCK_C))
        _copy_rows_kernel[grid](t, buf, R, C, c_pad, t.stride(0), t.stride(1), buf.stride(0),
                                BLOCK_R=COPY_BLOCK_R, BLOCK_C=COPY_BLOCK_C)
    return buf[:, :C]


def linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ weight (N, K)^T."""
    lead = x.shape[:-1]
    K = x.shape[-1]
    N, K2 = weight.shape
    if K != K2:
        raise ValueError(f"linear: x has {K} features, the weight {K2}")
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y.reshape(*lead, N)
    x2 = _k_major(x2)
    w = _k_major(weight)
    y_unit = 8 if y.stride(0) % 8 == 0 else 1
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N),)
    _linear_kernel[grid](
        x2, w, y, M, N, K,
        x2.stride(0) // 8, x2.stride(1), w.stride(0) // 8, w.stride(1), y.stride(0) // y_unit, y.stride(1),
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, Y_UNIT=y_unit,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return y.reshape(*lead, N)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, head_dim: int):
        super().__init__()
        out = (q_heads + 2 * kv_heads) * head_dim
        self.weight = nn.Parameter((torch.randn(out, hidden) * hidden**-0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)
