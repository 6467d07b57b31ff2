"""H100 reference kernel for level1/gemv_bf16_decode: y = x @ W^T for a few decode tokens, x
(BATCH, K) and W (N, K) in bf16 (the Llama-3-70B MLP up projection, a 470 MB weight), fp32
accumulation.

Reading W once is the whole cost, so the kernel is built for DRAM bandwidth. Each program owns
a BLOCK_N x (K / SPLIT_K) slab of W and streams it through a NUM_STAGES-deep cp.async pipeline
in BLOCK_N x BLOCK_K tiles (16-byte loads along K; each row of the tile is 256 contiguous
bytes); the batch rows, padded to a tile of 16 (a power of two up to 64), are multiplied in with
tl.dot, so the few FLOPs per weight byte run on the tensor cores and the CUDA cores only move
data. SPLIT_K is derived from K and N so that about PROGRAMS programs run: 896 for the default
28672 x 8192 weight, each streaming 512 KiB, with 72 KiB of shared memory apiece so three are
resident per SM, which keeps enough bytes in flight for HBM3 and leaves little tail when the
last wave drains. Split partial sums (fp32, SPLIT_K x BATCH x N x 4 bytes: under 1 per cent of
the weight) are added in a fixed order (deterministic) by a second small kernel that rounds to
bf16; with a single split the first kernel stores bf16 directly. Batches above 64 rows get more
row tiles on a third grid axis.

Edges: K loops are unmasked over whole BLOCK_K slices and one masked step takes the remainder
(split boundaries are multiples of BLOCK_K, so only the last split has one). Rows of x and of W
past the edges wrap onto valid ones for the loads and the masked stores drop them. Row strides
are passed in units of 8 elements when they are multiples of 8 (so Triton knows every row is
16-byte aligned and vectorises); otherwise, as for K = 8191, in units of 1: the loads are then
element-wise but still coalesced (tiles of BLOCK_N x UNALIGNED_BLOCK_K over UNALIGNED_WARPS warps,
so the per-element pointers fit in registers), and the weight is never copied (a copy would
triple the traffic).
The weight may be bf16 or fp32 (converted in registers). Offsets are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_N = 128
BLOCK_K = 128
MAX_BLOCK_M = 64
PROGRAMS = 1024
NUM_WARPS = 4
NUM_STAGES = 3
UNALIGNED_BLOCK_K = 64
UNALIGNED_WARPS = 8
REDUCE_BLOCK = 1024
TUNABLES = {
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [64, 128, 256],
    "MAX_BLOCK_M": [16, 32, 64],
    "PROGRAMS": [264, 528, 1024, 2048],
    "NUM_WARPS": [2, 4, 8],
    "NUM_STAGES": [2, 3, 4, 5],
    "UNALIGNED_BLOCK_K": [32, 64],
    "UNALIGNED_WARPS": [4, 8],
    "REDUCE_BLOCK": [512, 1024, 2048],
}


@triton.jit
def _gemv_splitk_kernel(x_ptr, w_ptr, part_ptr, M, N, K, k_split,
                        stride_xm_u, stride_xk, stride_wn_u, stride_wk, stride_ps, stride_pm, stride_pn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        X_UNIT: tl.constexpr, W_UNIT: tl.constexpr):
    # Program (pid_n, pid_s, pid_m): outputs [pid_n BLOCK_N, +BLOCK_N) x rows [pid_m BLOCK_M, +BLOCK_M),
    # summed over K range [pid_s k_split, +k_split); k_split is a multiple of BLOCK_K.
    stride_xm = stride_xm_u * X_UNIT
    stride_wn = stride_wn_u * W_UNIT
    pid_n = tl.program_id(0)
    pid_s = tl.program_id(1)
    pid_m = tl.program_id(2)
    k0 = pid_s * k_split
    k_len = tl.minimum(K - k0, k_split)

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
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


def _unit(stride: int, t: torch.Tensor) -> int:
    return 8 if stride % 8 == 0 and t.data_ptr() % 16 == 0 else 1


def gemv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x (..., K) @ weight (N, K)^T for a few rows of x."""
    lead = x.shape[:-1]
    K = x.shape[-1]
    N, K2 = weight.shape
    if K != K2:
        raise ValueError(f"gemv: x has {K} features, the weight {K2}")
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y.reshape(*lead, N)
    x_unit = _unit(x2.stride(0), x2)
    w_unit = _unit(weight.stride(0), weight)
    # Unaligned weight rows load element by element, one 64-bit pointer each: halve the tile
    # per thread so those pointers fit in registers.
    aligned = w_unit == 8 and weight.stride(1) == 1
    block_k, warps = (BLOCK_K, NUM_WARPS) if aligned else (UNALIGNED_BLOCK_K, UNALIGNED_WARPS)
    block_m = min(max(16, triton.next_power_of_2(M)), MAX_BLOCK_M)
    tiles_m = triton.cdiv(M, block_m)
    tiles_n = triton.cdiv(N, BLOCK_N)
    k_tiles = max(triton.cdiv(K, block_k), 1)
    splits = min(max(PROGRAMS // (tiles_n * tiles_m), 1), k_tiles)
    k_split = triton.cdiv(k_tiles, splits) * block_k
    splits = triton.cdiv(max(K, 1), k_split)  # no empty split
    if splits == 1:
        part, p_strides = y, (0, y.stride(0), y.stride(1))
    else:
        part = torch.empty((splits, M, N), device=x.device, dtype=torch.float32)
        p_strides = (part.stride(0), part.stride(1), part.stride(2))
    _gemv_splitk_kernel[(tiles_n, splits, tiles_m)](
        x2, weight, part, M, N, K, k_split,
        x2.stride(0) // x_unit, x2.stride(1), weight.stride(0) // w_unit, weight.stride(1), *p_strides,
        BLOCK_M=block_m, BLOCK_N=BLOCK_N, BLOCK_K=block_k, X_UNIT=x_unit, W_UNIT=w_unit,
        num_warps=warps, num_stages=NUM_STAGES,
    )
    if splits > 1:
        _sum_splits_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](part, y, M * N, splits, BLOCK=REDUCE_BLOCK)
    return y.reshape(*lead, N)


class ModelNew(nn.Module):
    def __init__(self, k: int, n: int):
        super().__init__()
        self.weight = nn.Parameter((torch.randn(n, k) * k**-0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return gemv(x, self.weight)
