"""H100 reference kernel for level1/int4_dequant_matmul: W4A16 GEMM y = x @ W^T, x (TOKENS, K)
in bf16, W (N, K) stored as int4 nibbles two per byte (low nibble = even column) with one bf16
scale per GROUP input channels: W[n, k] = (q - 8) * scale[n, k // GROUP].

The weight is dequantised in registers inside the GEMM loop and never exists in memory in bf16:
each step loads a BLOCK_N x BLOCK_K/2 tile of packed bytes, splits the nibbles, turns each into
the bf16 value 128 + q by OR-ing it into the mantissa of 128.0 (no int-to-float conversion,
which runs at a quarter rate on sm_90), interleaves the halves back into column order (tl.join +
reshape), and computes (v - 136) * scale in packed bf16 arithmetic: v - 136 = q - 8 is exact and
the product is rounded once, exactly as the reference rounds its fp32 product to bf16. The scale
is one per row of the tile when GROUP is a multiple of BLOCK_K (the host arranges this for
power-of-two groups), else gathered per column with BLOCK_K capped at GATHER_BLOCK_K. The
product is computed transposed, y^T tile = W tile @ x^T tile, so the dequantised weight is the
left wgmma operand, which Hopper takes straight from registers, while the x tile comes from
shared memory through the cp.async pipeline (NUM_STAGES deep).

Two launch shapes, chosen on the host from the token count:
- decode (TOKENS <= DECODE_MAX_M, e.g. 16): memory-bound on the N x K/2 packed bytes (4x fewer
  than bf16). Tiles of 128 weight rows x 16 tokens (tokens padded to a power of two), split-K so
  that about DECODE_PROGRAMS programs stream the weight with several resident per SM; fp32
  partial sums of the splits are added in a fixed order by a second kernel, which rounds to bf16.
- prefill (e.g. 2048 tokens): compute-bound; tiles of 128 weight rows x 256 tokens x 64, 8 warps
  (two warpgroups), so each dequantised weight tile feeds 256 tokens of tensor-core work and the
  CUDA-core dequantisation stays well under the wgmma time. Programs run in grouped order (GROUP_N
  weight tiles walk across the token tiles together), so each packed weight band is read from DRAM
  once and the activations are reused from L2.

Edges: K loops are unmasked over whole BLOCK_K slices with one masked step for the remainder,
where masked packed bytes read as 0x88 (both nibbles 8, weight 0) and masked activations as 0.
Rows past N and tokens past TOKENS wrap onto valid ones for the loads and the masked stores drop
them. Row strides are passed in units of 8 (x) and 16 (packed bytes) when they are multiples of
those, so Triton knows the rows are 16-byte aligned; otherwise in units of 1 (correct, slower).
K must be even (two nibbles per byte). Activations may be bf16 or fp16 (0x6400 = 1024.0 plays the
role of 128.0); scales of another dtype are rounded to it. Offsets are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_N = 128
BLOCK_M = 256
BLOCK_K = 64
GROUP_N = 8
NUM_WARPS = 8
NUM_STAGES = 3
DECODE_MAX_M = 64
DECODE_BLOCK_N = 128
DECODE_BLOCK_K = 128
DECODE_PROGRAMS = 512
DECODE_WARPS = 4
DECODE_STAGES = 4
GATHER_BLOCK_K = 32
REDUCE_BLOCK = 1024
TUNABLES = {
    "BLOCK_N": [64, 128],
    "BLOCK_M": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_N": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "DECODE_MAX_M": [16, 32, 64],
    "DECODE_BLOCK_N": [64, 128, 256],
    "DECODE_BLOCK_K": [64, 128, 256],
    "DECODE_PROGRAMS": [264, 512, 1024, 2048],
    "DECODE_WARPS": [4, 8],
    "DECODE_STAGES": [2, 3, 4, 5],
    "GATHER_BLOCK_K": [16, 32],
    "REDUCE_BLOCK": [512, 1024, 2048],
}


@triton.jit
def _nibbles(packed, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MAGIC: tl.constexpr, dtype: tl.constexpr):
    # (BLOCK_N, BLOCK_K/2) bytes -> (BLOCK_N, BLOCK_K) values MAGIC_value + q in the activation
    # dtype, column order restored (low nibble = even column). OR-ing q into the mantissa of a
    # power of two (bf16 128.0 = 0x4300, fp16 1024.0 = 0x6400) converts it without an int-to-float
    # instruction (a quarter-rate conversion on sm_90).
    lo = ((packed & 0xF).to(tl.uint16) | MAGIC).to(dtype, bitcast=True)
    hi = ((packed >> 4).to(tl.uint16) | MAGIC).to(dtype, bitcast=True)
    return tl.join(lo, hi).reshape(BLOCK_N, BLOCK_K)


@triton.jit
def _w4a16_kernel(x_ptr, p_ptr, s_ptr, out_ptr, M, N, K, split_tiles,
                  stride_xm_u, stride_xk, stride_pn_u, stride_sn, stride_sg, stride_os, stride_om, stride_on,
                  GROUP: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr,
                  GROUP_N: tl.constexpr, SCALE_PER_ROW: tl.constexpr, X_UNIT: tl.constexpr, P_UNIT: tl.constexpr,
                  MAGIC: tl.constexpr, BIAS: tl.constexpr):
    # Program (tile, pid_s): out^T[n tile, m tile] summed over K range [pid_s k_split, +k_split),
    # k_split = split_tiles BLOCK_K. Tiles run in grouped order over (n tile, m tile).
    stride_xm = stride_xm_u * X_UNIT
    stride_pn = stride_pn_u * P_UNIT
    pid = tl.program_id(0)
    pid_s = tl.program_id(1)
    tiles_n = tl.cdiv(N, BLOCK_N)
    tiles_m = tl.cdiv(M, BLOCK_M)
    per_group = GROUP_N * tiles_m
    first_n = (pid // per_group) * GROUP_N
    n_in_group = tl.minimum(tiles_n - first_n, GROUP_N)
    pid_n = first_n + (pid % per_group) % n_in_group
    pid_m = (pid % per_group) // n_in_group
    k_split = split_tiles * BLOCK_K
    k0 = pid_s * k_split
    k_len = tl.minimum(K - k0, k_split)

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_k = tl.arange(0, BLOCK_K)
    offs_j = tl.arange(0, BLOCK_K // 2)
    wrows = (offs_n % N).to(tl.int64)
    xrows = (offs_m % M).to(tl.int64)
    p_ptrs = p_ptr + wrows[:, None] * stride_pn + (pid_s * split_tiles * (BLOCK_K // 2) + offs_j[None, :]).to(tl.int64)
    x_ptrs = x_ptr + xrows[None, :] * stride_xm + (k0 + offs_k[:, None]).to(tl.int64) * stride_xk  # x^T tile
    s_row = s_ptr + wrows * stride_sn

    acc = tl.zeros((BLOCK_N, BLOCK_M), dtype=tl.float32)
    k_full = k_len // BLOCK_K
    for kt in range(0, k_full):
        kb = k0 + kt * BLOCK_K
        packed = tl.load(p_ptrs)
        xt = tl.load(x_ptrs)
        q = _nibbles(packed, BLOCK_N, BLOCK_K, MAGIC, x_ptr.dtype.element_ty)
        if SCALE_PER_ROW:
            scale = tl.load(s_row + (kb // GROUP) * stride_sg)[:, None]
        else:
            scale = tl.load(s_row[:, None] + ((kb + offs_k[None, :]) // GROUP) * stride_sg)
        w = (q - BIAS) * scale.to(x_ptr.dtype.element_ty)
        acc = tl.dot(w, xt, acc)
        p_ptrs += BLOCK_K // 2
        x_ptrs += BLOCK_K * stride_xk
    k_left = k_len - k_full * BLOCK_K
    if k_left > 0:
        kb = k0 + k_full * BLOCK_K
        packed = tl.load(p_ptrs, mask=offs_j[None, :] < k_left // 2, other=0x88)
        xt = tl.load(x_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        q = _nibbles(packed, BLOCK_N, BLOCK_K, MAGIC, x_ptr.dtype.element_ty)
        if SCALE_PER_ROW:
            scale = tl.load(s_row + (kb // GROUP) * stride_sg)[:, None]
        else:
            scale = tl.load(s_row[:, None] + ((kb + offs_k[None, :]) // GROUP) * stride_sg,
                            mask=offs_k[None, :] < k_left, other=0.0)
        w = (q - BIAS) * scale.to(x_ptr.dtype.element_ty)
        acc = tl.dot(w, xt, acc)

    o_ptrs = (out_ptr + pid_s.to(tl.int64) * stride_os + offs_m.to(tl.int64)[None, :] * stride_om
              + offs_n.to(tl.int64)[:, None] * stride_on)
    mask = (offs_n[:, None] < N) & (offs_m[None, :] < M)
    tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _sum_splits_kernel(part_ptr, y_ptr, numel, splits, BLOCK: tl.constexpr):
    # y.flat[i] = sum over s of part[s].flat[i], added in split order; part is (splits, numel) fp32.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(part_ptr + s * numel + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, acc.to(y_ptr.dtype.element_ty), mask=mask)


# Activation dtype -> (bit pattern of a power of two P with q in its low mantissa bits, P + 8).
_MAGIC = {torch.bfloat16: (0x4300, 136.0), torch.float16: (0x6400, 1032.0)}


def _unit(stride: int, t: torch.Tensor, unit: int) -> int:
    return unit if stride % unit == 0 and t.data_ptr() % 16 == 0 else 1


def w4a16_matmul(x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """x (..., K) @ dequant(packed (N, K/2), scales (N, K/group))^T."""
    lead = x.shape[:-1]
    K = x.shape[-1]
    N = packed.shape[0]
    if K % 2 or packed.shape[1] * 2 != K or packed.dtype != torch.uint8:
        raise ValueError(f"w4a16: packed weight {tuple(packed.shape)} {packed.dtype} does not fit K = {K}")
    if packed.stride(1) != 1:
        raise ValueError("w4a16: packed weight rows must be contiguous")
    if x.dtype not in _MAGIC:
        raise ValueError(f"w4a16: activations must be bfloat16 or float16, not {x.dtype}")
    x2 = x.reshape(-1, K)
    M = x2.shape[0]
    y = torch.empty((M, N), device=x.device, dtype=x.dtype)
    if M == 0 or N == 0:
        return y.reshape(*lead, N)
    if M <= DECODE_MAX_M:
        block_n, block_m, block_k = DECODE_BLOCK_N, max(16, triton.next_power_of_2(M)), DECODE_BLOCK_K
        warps, stages, programs = DECODE_WARPS, DECODE_STAGES, DECODE_PROGRAMS
    else:
        block_n, block_m, block_k = BLOCK_N, BLOCK_M, BLOCK_K
        warps, stages, programs = NUM_WARPS, NUM_STAGES, 1
    if group % block_k and block_k % group == 0 and group >= 16:
        block_k = group  # a tile inside one scale group
    scale_per_row = group % block_k == 0
    if not scale_per_row:
        block_k = min(block_k, GATHER_BLOCK_K)  # per-column scale pointers must fit in registers
    tiles = triton.cdiv(N, block_n) * triton.cdiv(M, block_m)
    k_tiles = max(triton.cdiv(K, block_k), 1)
    splits = min(max(programs // tiles, 1), k_tiles)
    split_tiles = triton.cdiv(k_tiles, splits)
    splits = triton.cdiv(max(K, 1), split_tiles * block_k)  # no empty split
    if splits == 1:
        part, o_strides = y, (0, y.stride(0), y.stride(1))
    else:
        part = torch.empty((splits, M, N), device=x.device, dtype=torch.float32)
        o_strides = (part.stride(0), part.stride(1), part.stride(2))
    x_unit = _unit(x2.stride(0), x2, 8)
    p_unit = _unit(packed.stride(0), packed, 16)
    _w4a16_kernel[(tiles, splits)](
        x2, packed, scales, part, M, N, K, split_tiles,
        x2.stride(0) // x_unit, x2.stride(1), packed.stride(0) // p_unit, scales.stride(0), scales.stride(1),
        *o_strides,
        GROUP=group, BLOCK_N=block_n, BLOCK_M=block_m, BLOCK_K=block_k, GROUP_N=GROUP_N,
        SCALE_PER_ROW=scale_per_row, X_UNIT=x_unit, P_UNIT=p_unit, MAGIC=_MAGIC[x.dtype][0], BIAS=_MAGIC[x.dtype][1],
        num_warps=warps, num_stages=stages,
    )
    if splits > 1:
        _sum_splits_kernel[(triton.cdiv(M * N, REDUCE_BLOCK),)](part, y, M * N, splits, BLOCK=REDUCE_BLOCK)
    return y.reshape(*lead, N)


class ModelNew(nn.Module):
    def __init__(self, k: int, n: int, group: int):
        super().__init__()
        self.group = group
        self.register_buffer("packed", torch.randint(0, 256, (n, k // 2), dtype=torch.uint8))
        self.scales = nn.Parameter((torch.randn(n, k // group) * (k**-0.5 / 4)).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return w4a16_matmul(x, self.packed, self.scales, self.group)
