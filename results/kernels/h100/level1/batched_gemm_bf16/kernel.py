"""H100 reference kernel for level1/batched_gemm_bf16: C[b] = A[b] @ B[b] in bf16 with fp32
accumulation, for A (BATCH, M, K) and B (BATCH, K, N).

All products run in one launch: a 1-D grid of BATCH x tiles_m x tiles_n programs, batch-major, so
the programs resident at any moment share one or two batch entries and their A and B are read
from DRAM about once, then served from L2; inside a batch entry, tiles follow grouped (swizzled)
order (GROUP_M tile-rows walk across N together). Each program computes a BLOCK_M x BLOCK_N tile
with tl.dot, which Triton lowers to wgmma on sm_90a, NUM_STAGES K-slices in flight through
cp.async; the fp32 accumulator is rounded to bf16 only at the store. Wide products use 128 x 256
tiles (8 warps = two warpgroups, 3 stages of 48 KiB); products with N <= BLOCK_N_NARROW (the
skinny 512 x 128 variant) use 128 x 128 tiles with NUM_STAGES_NARROW stages, so no half-empty tile
wastes tensor-core time.

Edges: the K loop runs unmasked over whole BLOCK_K slices and one masked step takes the
remainder. Rows past M wrap onto valid rows and columns wrap modulo a multiple of 8 (n_wrap), so
the loads need no M/N masks and keep 16-byte vectors; the masked store drops the extra results.
Strides reach the kernel in units of 8 elements, telling Triton every row is 16-byte aligned;
operands whose row or batch strides are not multiples of 8, or B when N is not (the odd
1000 x 1500 x 777 variant), are first copied by a Triton kernel into a buffer padded to 16
(zeros in the padding). Batch and row
offsets are int64. Empty products return an empty or zero result.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 256
BLOCK_N_NARROW = 128
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
NUM_STAGES_NARROW = 4
COPY_BLOCK_R = 16
COPY_BLOCK_C = 256
TUNABLES = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [128, 256],
    "BLOCK_N_NARROW": [64, 128],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "NUM_STAGES_NARROW": [3, 4, 5],
    "COPY_BLOCK_C": [128, 256, 512],
}


@triton.jit
def _bmm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, n_wrap8,
                stride_ab8, stride_am8, stride_ak, stride_bb8, stride_bk8, stride_bn,
                stride_cb_u, stride_cm_u, stride_cn,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                C_UNIT: tl.constexpr):
    # Strides ending in 8 (and the column wrap) come in units of 8 elements: multiplying back by 8
    # tells Triton every row starts on a 16-byte boundary, so the loads are 16-byte vectors.
    stride_ab = stride_ab8 * 8
    stride_am = stride_am8 * 8
    stride_bb = stride_bb8 * 8
    stride_bk = stride_bk8 * 8
    n_wrap = n_wrap8 * 8
    stride_cb = stride_cb_u * C_UNIT
    stride_cm = stride_cm_u * C_UNIT
    pid = tl.program_id(0)
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_batch = tiles_m * tiles_n
    batch = (pid // per_batch).to(tl.int64)
    t = pid % per_batch
    # Grouped ordering inside one batch entry.
    per_group = GROUP_M * tiles_n
    first_m = (t // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (t % per_group) % rows_in_group
    pid_n = (t % per_group) // rows_in_group

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)
    cols = (offs_n % n_wrap).to(tl.int64)
    a_ptrs = a_ptr + batch * stride_ab + rows[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + batch * stride_bb + offs_k[:, None] * stride_bk + cols[None, :] * stride_bn

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

    c_ptrs = (c_ptr + batch * stride_cb + offs_m.to(tl.int64)[:, None] * stride_cm
              + offs_n.to(tl.int64)[None, :] * stride_cn)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _copy_rows_kernel(src_ptr, dst_ptr, R, C, C_pad, stride_sb, stride_sr, stride_sc, stride_db, stride_dr,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    # dst[b, :, :C] = src[b], dst[b, :, C:C_pad] = 0; program axis 2 is the batch entry.
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    b = tl.program_id(2).to(tl.int64)
    r64 = rows.to(tl.int64)[:, None]
    inside = (rows[:, None] < R) & (cols[None, :] < C)
    v = tl.load(src_ptr + b * stride_sb + r64 * stride_sr + cols[None, :].to(tl.int64) * stride_sc,
                mask=inside, other=0.0)
    tl.store(dst_ptr + b * stride_db + r64 * stride_dr + cols[None, :], v,
             mask=(rows[:, None] < R) & (cols[None, :] < C_pad))


def _aligned_rows(x: torch.Tensor, need_cols8: bool) -> torch.Tensor:
    """x, or a copy of x (BATCH, R, C) whose rows are contiguous and start every 16 bytes.
    With need_cols8, the column count must also be a multiple of 8 (columns are read up to it)."""
    nb, R, C = x.shape
    if (x.stride(2) == 1 and x.stride(1) % 8 == 0 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0
            and (C % 8 == 0 or not need_cols8)):
        return x
    c_pad = triton.cdiv(max(C, 1), 16) * 16
    buf = torch.empty((nb, R, c_pad), device=x.device, dtype=x.dtype)
    if nb and R:
        grid = (triton.cdiv(R, COPY_BLOCK_R), triton.cdiv(c_pad, COPY_BLOCK_C), nb)
        _copy_rows_kernel[grid](x, buf, R, C, c_pad, x.stride(0), x.stride(1), x.stride(2), buf.stride(0),
                                buf.stride(1), BLOCK_R=COPY_BLOCK_R, BLOCK_C=COPY_BLOCK_C)
    return buf[:, :, :C]


def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    nb, M, K = a.shape
    nb2, K2, N = b.shape
    if nb != nb2 or K != K2:
        raise ValueError(f"bmm: shapes {tuple(a.shape)} and {tuple(b.shape)} do not match")
    c = torch.empty((nb, M, N), device=a.device, dtype=a.dtype)
    if nb == 0 or M == 0 or N == 0:
        return c
    a = _aligned_rows(a, need_cols8=False)
    b = _aligned_rows(b, need_cols8=True)
    n_wrap = N if N % 8 == 0 else b.stride(1)  # a copied B is zero-padded to its row stride
    c_unit = 8 if N % 8 == 0 else 1
    narrow = N <= BLOCK_N_NARROW
    block_n = BLOCK_N_NARROW if narrow else BLOCK_N
    stages = NUM_STAGES_NARROW if narrow else NUM_STAGES
    grid = (nb * triton.cdiv(M, BLOCK_M) * triton.cdiv(N, block_n),)
    _bmm_kernel[grid](
        a, b, c, M, N, K, n_wrap // 8,
        a.stride(0) // 8, a.stride(1) // 8, a.stride(2), b.stride(0) // 8, b.stride(1) // 8, b.stride(2),
        c.stride(0) // c_unit, c.stride(1) // c_unit, c.stride(2),
        BLOCK_M=BLOCK_M, BLOCK_N=block_n, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, C_UNIT=c_unit,
        num_warps=NUM_WARPS, num_stages=stages,
    )
    return c


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return bmm(a, b)
