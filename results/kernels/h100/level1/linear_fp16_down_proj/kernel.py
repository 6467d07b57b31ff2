"""H100 reference kernel for level1/linear_fp16_down_proj: the Llama-3-8B MLP down projection
y = x @ W^T, x (TOKENS, FFN) and W (HIDDEN, FFN), in fp16 with fp32 accumulation.

Two paths, chosen on the host from the token count.

Prefill (TOKENS > DECODE_MAX_M): one program per BLOCK_M x BLOCK_N tile of y (128 x 256,
BLOCK_K 64, 8 warps = two warpgroups, wgmma on sm_90a), NUM_STAGES K-slices of x and W in flight
through cp.async. W is read in its stored K-major layout, which wgmma takes from shared memory
directly. Grouped (swizzled) program order lets each band of x and W come from DRAM about once
and be reused from L2; the long K = 14336 keeps the tensor cores busy between tile switches.

Decode (TOKENS <= DECODE_MAX_M, e.g. 16): the 117 MB weight is the whole cost, so the kernel is
shaped for DRAM bandwidth. The tokens fit one small tile (16 rows, padded up to a power of two),
each program streams a DECODE_BLOCK_N x (K / SPLIT_K) slab of W through a DECODE_STAGES-deep
cp.async pipeline, and SPLIT_K is derived so that about DECODE_PROGRAMS programs run (72 KiB of
shared memory each for 16 tokens, so three fit on an SM), enough bytes in flight to saturate
HBM3 although the output is only TOKENS x HIDDEN. The fp32 partial sums of the splits go to a
small workspace (SPLIT_K x TOKENS x HIDDEN x 4 bytes, a few per cent of the weight) and a second
kernel adds them in a fixed order (deterministic) and rounds to fp16.

Edges: K loops are unmasked over whole BLOCK_K slices with one masked step for the remainder
(split boundaries are multiples of the decode BLOCK_K, so only the last split has one). Rows and
features past the edges wrap onto valid ones for the loads (the strided dimension, so 16-byte
vectors along K survive) and the masked stores drop them. Row strides reach the kernels in units
of 8 elements so Triton knows rows are 16-byte aligned; an operand whose row stride is not a
multiple of 8 is first copied by a Triton kernel into a padded buffer. The weight may be fp16 or
fp32 (converted in registers). Offsets are int64. Empty inputs return empty or zero outputs.
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
DECODE_MAX_M = 64
DECODE_BLOCK_N = 128
DECODE_BLOCK_K = 128
DECODE_PROGRAMS = 1024
DECODE_WARPS = 4
DECODE_STAGES = 3
REDUCE_BLOCK = 1024
COPY_BLOCK_R = 16
COPY_BLOCK_C = 256
TUNABLES = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "DECODE_MAX_M": [16, 32, 64],
    "DECODE_BLOCK_N": [64, 128, 256],
    "DECODE_BLOCK_K": [64, 128, 256],
    "DECODE_PROGRAMS": [264, 528, 1024, 2048],
    "DECODE_WARPS": [2, 4, 8],
    "DECODE_STAGES": [2, 3, 4, 5],
    "REDUCE_BLOCK": [512, 1024, 2048],
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
def _splitk_kernel(x_ptr, w_ptr, part_ptr, M, N, K, k_split,
                   stride_xm8, stride_xk, stride_wn8, stride_wk, stride_ps, stride_pm, stride_pn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    # Program (pid_n, pid_s): features [pid_n BLOCK_N, +BLOCK_N) over K range
    # [pid_s k_split, +k_split); k_split is a multiple of BLOCK_K. All M (<= BLOCK_M) rows at once.
    stride_xm = stride_xm8 * 8
    stride_wn = stride_wn8 * 8
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    k0 = pid_s * k_split
    k_len = tl.minimum(K - k0, k_split)

    offs_m = tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)
    feats = (offs_n % N).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + (k0 + offs_k[None, :]).to(tl.int64) * stride_xk
    w_ptrs = w_ptr + feats[None, :] * stride_wn + (k0 + offs_k[:, None]).to(tl.int64) * stride_wk

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    k_full = k_len // BLOCK_K
    for _ in range(0, k_full):
        a = tl.load(x_ptrs)
        b = tl.load(w_ptrs).to(x_ptr.dtype.element_ty)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    k_left = k_len - k_full * BLOCK_K
    if k_left > 0:
        a = tl.load(x_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(w_ptrs, mask=offs_k[:, None] < k_left, other=0.0).to(x_ptr.dtype.element_ty)
        acc = tl.dot(a, b, acc)

    p_ptrs = (part_ptr + pid_s.to(tl.int64) * stride_ps + offs_m.to(tl.int64)[:, None] * stride_pm
              + offs_n.to(tl.int64)[None, :] * stride_pn)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(p_ptrs, acc.to(part_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sum_splits_kernel(part_ptr, y_ptr, numel, splits, BLOCK: tl.constexpr):
    # y.flat[i] = sum over s of part[s].flat[i], added in split order; part is (splits, numel) fp32.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


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


def _decode(x2: torch.Tensor, w: torch.Tensor, y: torch.Tensor) -> None:
    M, K = x2.shape
    N = w.shape[0]
    tiles_n = triton.cdiv(N, DECODE_BLOCK_N)
    k_tiles = max(triton.cdiv(K, DECODE_BLOCK_K), 1)
    splits = min(max(DECODE_PROGRAMS // tiles_n, 1), k_tiles)
    k_split = triton.cdiv(k_tiles, splits) * DECODE_BLOCK_K
    splits = triton.cdiv(max(K, 1), k_split)  # no empty split
    block_m = max(16, triton.next_power_of_2(M))
    args = (x2.stride(0) // 8, x2.stride(1), w.stride(0) // 8, w.stride(1))
    if splits == 1:
        part, strides = y, (0, y.stride(0), y.stride(1))
    else:
        part = torch.empty((splits, M, N), device=y.device, dtype=torch.float32)
        strides = (part.stride(0), part.stride(1), part.stride(2))
    _splitk_kernel[(tiles_n, splits)](
        x2, w, part, M, N, K, k_split, *args, *strides,
        BLOCK_M=block_m, BLOCK_N=DECODE_BLOCK_N, BLOCK_K=DECODE_BLOCK_K,
        num_warps=DECODE_WARPS, num_stages=DECODE_STAGES,
    )
    if splits > 1:
        _sum_splits_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](part, y, M * N, splits, BLOCK=REDUCE_BLOCK)


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
    if M <= DECODE_MAX_M:
        _decode(x2, w, y)
        return y.reshape(*lead, N)
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
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(hidden, ffn) * ffn**-0.5).to(torch.float16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return linear(x, self.weight)
