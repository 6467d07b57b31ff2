"""H100 reference kernel for level1/linear_backward_bf16: the two gradients of y = x @ w^T,
grad_x = grad_out @ w (TOKENS x IN, reducing over OUT) and grad_w = grad_out^T @ x (OUT x IN,
reducing over all TOKENS), in bf16 with fp32 accumulation, returned as (grad_x, grad_w).

Both GEMMs run in ONE launch: the 1-D grid holds the tiles of one product followed by the tiles
of the other, the one with the longer reduction first (grad_x for the MLP up projection, K =
14336 against 8192), so the long tiles start early and the short ones fill the tail; there is
no drain-and-refill between two kernels and no second launch. Each product is read in the
layout it is stored in: grad_x takes grad_out K-major and w N-major; grad_w takes grad_out
M-major (its transpose, which wgmma reads from shared memory as is) and x N-major, so nothing
is transposed in memory. Every program computes a BLOCK_M x BLOCK_N tile (128 x 256, BLOCK_K 64,
8 warps = two warpgroups, wgmma on sm_90a, NUM_STAGES K-slices in flight through cp.async),
with grouped (swizzled) order inside each product so operand bands are reused from L2; the fp32
accumulators are rounded to bf16 only at the store.

Edges: K loops are unmasked over whole BLOCK_K slices with one masked step for the remainder.
Rows and columns past the edges wrap onto valid ones for the loads, modulo multiples of 8 along
the contiguous dimension so 16-byte vectors survive, and the masked stores drop them. Row
strides reach the kernel in units of 8 elements; when IN or OUT is not a multiple of 8 (the odd
1999 outputs), the operands with that row length are first copied by a Triton kernel into
buffers padded to 16 (zeros in the padding). Offsets are int64. Zero tokens give grad_w = 0.
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
def _gemm_tile(a_ptr, b_ptr, c_ptr, t, M, N, K, m_wrap, n_wrap,
               stride_am, stride_ak, stride_bk, stride_bn, stride_cm,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # Tile t (grouped order) of C (M, N) = A (M, K) @ B (K, N); C is row-major with row stride stride_cm.
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % per_group) % rows_in_group
    pid_n = (t % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % m_wrap).to(tl.int64)
    cols = (offs_n % n_wrap).to(tl.int64)
    a_ptrs = a_ptr + rows[:, None] * stride_am + offs_k[None, :].to(tl.int64) * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + cols[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_full = K // BLOCK_K
    for _ in range(0, k_full):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    k_left = K - k_full * BLOCK_K
    if k_left > 0:
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b, acc)

    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n.to(tl.int64)[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _linear_backward_kernel(g_ptr, w_ptr, x_ptr, gx_ptr, gw_ptr, T, IN, OUT, g_wrap8, w_wrap8, x_wrap8,
                            ld_g8, ld_w8, ld_x8, ld_gx_u, ld_gw_u,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr, DX_FIRST: tl.constexpr, OUT_UNIT: tl.constexpr):
    # Row strides come in units of 8 elements (16-byte rows); the wraps are the (padded) row
    # lengths of grad_out, w and x, multiples of 8, for the wrapped loads.
    ld_g = ld_g8 * 8
    ld_w = ld_w8 * 8
    ld_x = ld_x8 * 8
    ld_gx = ld_gx_u * OUT_UNIT
    ld_gw = ld_gw_u * OUT_UNIT
    g_wrap = g_wrap8 * 8
    w_wrap = w_wrap8 * 8
    x_wrap = x_wrap8 * 8
    pid = tl.program_id(0)
    tiles_dx = tl.cdiv(T, BLOCK_M) * tl.cdiv(IN, BLOCK_N)
    tiles_dw = tl.cdiv(OUT, BLOCK_M) * tl.cdiv(IN, BLOCK_N)
    if DX_FIRST:
        is_dx = pid < tiles_dx
        t = tl.where(is_dx, pid, pid - tiles_dx)
    else:
        is_dx = pid >= tiles_dw
        t = tl.where(is_dx, pid - tiles_dw, pid)
    if is_dx:
        # grad_x (T, IN) = grad_out (T, OUT) @ w (OUT, IN)
        _gemm_tile(g_ptr, w_ptr, gx_ptr, t, T, IN, OUT, T, w_wrap,
                   ld_g, 1, ld_w, 1, ld_gx,
                   BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M)
    else:
        # grad_w (OUT, IN) = grad_out^T (OUT, T) @ x (T, IN)
        _gemm_tile(g_ptr, x_ptr, gw_ptr, t, OUT, IN, T, g_wrap, x_wrap,
                   1, ld_g, ld_x, 1, ld_gw,
                   BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M)


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


def _rows16(t: torch.Tensor) -> torch.Tensor:
    """t (R, C) itself when rows are contiguous, 16-byte aligned and C is a multiple of 8 (the
    loads wrap modulo it), else a (R, ceil16(C)) copy with zeros in the padding."""
    R, C = t.shape
    if t.stride(1) == 1 and t.stride(0) % 8 == 0 and C % 8 == 0 and t.data_ptr() % 16 == 0:
        return t
    c_pad = triton.cdiv(max(C, 1), 16) * 16
    buf = torch.empty((R, c_pad), device=t.device, dtype=t.dtype)
    if R:
        grid = (triton.cdiv(R, COPY_BLOCK_R), triton.cdiv(c_pad, COPY_BLOCK_C))
        _copy_rows_kernel[grid](t, buf, R, C, c_pad, t.stride(0), t.stride(1), buf.stride(0),
                                BLOCK_R=COPY_BLOCK_R, BLOCK_C=COPY_BLOCK_C)
    return buf


def linear_backward(x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
    T, IN = x.shape
    OUT, IN2 = w.shape
    if IN != IN2 or tuple(grad_out.shape) != (T, OUT):
        raise ValueError(f"linear_backward: shapes x {tuple(x.shape)}, w {tuple(w.shape)}, "
                         f"grad_out {tuple(grad_out.shape)} do not match")
    grad_x = torch.empty((T, IN), device=x.device, dtype=x.dtype)
    grad_w = torch.empty((OUT, IN), device=x.device, dtype=w.dtype)
    tiles_dx = triton.cdiv(T, BLOCK_M) * triton.cdiv(IN, BLOCK_N)
    tiles_dw = triton.cdiv(OUT, BLOCK_M) * triton.cdiv(IN, BLOCK_N)
    if tiles_dx + tiles_dw == 0:
        return grad_x, grad_w
    g = _rows16(grad_out)
    wp = _rows16(w)
    xp = _rows16(x)
    out_unit = 8 if IN % 8 == 0 else 1
    _linear_backward_kernel[(tiles_dx + tiles_dw,)](
        g, wp, xp, grad_x, grad_w, T, IN, OUT, g.shape[1] // 8, wp.shape[1] // 8, xp.shape[1] // 8,
        g.stride(0) // 8, wp.stride(0) // 8, xp.stride(0) // 8, IN // out_unit, IN // out_unit,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        DX_FIRST=OUT >= T, OUT_UNIT=out_unit,
        num_warps=NUM_WARPS, num_stages=NUM_STAGES,
    )
    return grad_x, grad_w


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, grad_out: torch.Tensor):
        return linear_backward(x, w, grad_out)
