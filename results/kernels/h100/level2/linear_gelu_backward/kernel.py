"""H100 reference kernel for level2/linear_gelu_backward: for y = gelu(x @ w^T + b) (erf GELU) in bf16, the
gradients dx = dz @ w, dw = dz^T @ x and db = sum_tokens dz, where dz = grad_out * gelu'(x @ w^T + b).

Three grouped-tile GEMM kernels (BLOCK_M x BLOCK_N tiles, bf16 wgmma with fp32 accumulators,
NUM_STAGES-deep cp.async pipelines, GROUP_M row tiles per group for L2 reuse). (1) dz: recomputes the
pre-activation z = x @ w^T + b on chip and, in the epilogue, forms grad_out * (Phi(z) + z phi(z)) in
fp32 and stores it once in bf16 (as autograd's bf16 gelu_backward does) into a scratch buffer whose
row length is padded to a multiple of 8 (pad columns written as 0), so that later K loops over it
get 16-byte loads; z itself never reaches DRAM. The same epilogue reduces its bf16 dz tile over its
rows into one fp32 partial bias gradient per (row tile, column): no atomics, deterministic.
(2) dx = dz @ w (K = OUT). (3) dw = dz^T @ x (K = TOKENS; the dz^T operand is read column-major from
dz, which wgmma takes from shared memory as a transposed tile); the programs of the first column tile
also sum the partial bias gradients of their rows and write db. DRAM traffic beyond the three GEMMs'
operands: dz written once and read twice (2 bytes per element each time), the cost of not
recomputing the first GEMM in each of the other two. Ragged edges: a dimension that is not an operand's contiguous one
is wrapped onto valid rows for the loads (never stored); contiguous ones are masked at a bound that
is a multiple of 8 where one exists (dz's padded rows), so loads keep 16-byte width; reduction tails
are zero-masked, stores are masked; offsets are int64.
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
    "BLOCK_N": [64, 128],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [3, 4, 5],
    "NUM_WARPS": [4, 8],
}


@triton.jit
def _tile_ids(M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def _dz_kernel(x_ptr, w_ptr, b_ptr, g_ptr, dz_ptr, db_part_ptr, M, N, K, N_PAD, stride_xm, stride_wn, stride_gm,
               stride_dzm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_G: tl.constexpr):
    # M = TOKENS, N = OUT, K = IN. ALIGN (ALIGN_G): a power of two <= 8 dividing K and the operands' row
    # strides (grad_out's row stride), host-checked; rewriting them as multiples of it (an identity)
    # tells the compiler so, for 16-byte cp.async loads. dz's row stride and N_PAD are multiples of 8.
    K = (K // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    stride_wn = (stride_wn // ALIGN) * ALIGN
    stride_gm = (stride_gm // ALIGN_G) * ALIGN_G
    stride_dzm = (stride_dzm // 8) * 8
    N_PAD = (N_PAD // 8) * 8
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)
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

    row_ok = offs_m[:, None] < M
    valid = row_ok & (offs_n[None, :] < N)
    bias = tl.load(b_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)
    z = acc + bias[None, :]
    m64 = offs_m.to(tl.int64)[:, None]
    g = tl.load(g_ptr + m64 * stride_gm + offs_n[None, :], mask=valid, other=0.0).to(tl.float32)
    dgelu = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476)) + z * tl.exp(-0.5 * z * z) * 0.3989422804014327
    dz = tl.where(valid, g * dgelu, 0.0).to(dz_ptr.dtype.element_ty)  # pad columns N..N_PAD get 0
    tl.store(dz_ptr + m64 * stride_dzm + offs_n[None, :], dz, mask=row_ok & (offs_n[None, :] < N_PAD))
    part = tl.sum(dz.to(tl.float32), axis=0)  # this row tile's share of db, from the rounded dz
    tl.store(db_part_ptr + pid_m.to(tl.int64) * N + offs_n, part, mask=offs_n < N)


@triton.jit
def _dx_kernel(dz_ptr, w_ptr, dx_ptr, M, N, K, K_PAD, stride_dzm, stride_wk, stride_dxm,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
               ALIGN: tl.constexpr):
    # dx = dz @ w: M = TOKENS, N = IN, K = OUT. dz's K loop runs to K_PAD (a multiple of 8; dz's pad
    # columns are 0) so its rows load 16 bytes at a time; w's rows (the K index) are masked at K and
    # its columns (contiguous) at N, not wrapped, so they keep their vector width. ALIGN divides N and
    # w's and dx's row strides (host-checked).
    stride_dzm = (stride_dzm // 8) * 8
    K_PAD = (K_PAD // 8) * 8
    N = (N // ALIGN) * ALIGN
    stride_wk = (stride_wk // ALIGN) * ALIGN
    stride_dxm = (stride_dxm // ALIGN) * ALIGN
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = (offs_m % M).to(tl.int64)
    a_ptrs = dz_ptr + rows[:, None] * stride_dzm + offs_k[None, :]
    b_ptrs = w_ptr + offs_k.to(tl.int64)[:, None] * stride_wk + offs_n[None, :]
    n_ok = offs_n[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K_PAD, BLOCK_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K_PAD - k * BLOCK_K, other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < K - k * BLOCK_K) & n_ok, other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K * stride_wk
    out = dx_ptr + offs_m.to(tl.int64)[:, None] * stride_dxm + offs_n[None, :]
    tl.store(out, acc.to(dx_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & n_ok)


@triton.jit
def _dw_kernel(dz_ptr, x_ptr, db_part_ptr, dw_ptr, db_ptr, M, N, K, M_PAD, n_parts, stride_dzm, stride_xm,
               stride_dwm, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr, ALIGN: tl.constexpr):
    # dw = dz^T @ x: M = OUT, N = IN, K = TOKENS. Both operands are contiguous along M / N: those
    # dimensions are masked, not wrapped (dz's at M_PAD, a multiple of 8, whose pad columns are 0;
    # x's at N, a multiple of ALIGN), so the loads keep their vector width; the K tail masks whole
    # rows. ALIGN divides N and x's and dw's row strides (host-checked).
    stride_dzm = (stride_dzm // 8) * 8
    M_PAD = (M_PAD // 8) * 8
    N = (N // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    stride_dwm = (stride_dwm // ALIGN) * ALIGN
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = dz_ptr + offs_k.to(tl.int64)[None, :] * stride_dzm + offs_m[:, None]
    b_ptrs = x_ptr + offs_k.to(tl.int64)[:, None] * stride_xm + offs_n[None, :]
    m_ok = offs_m[:, None] < M_PAD
    n_ok = offs_n[None, :] < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=m_ok & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & n_ok, other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)
        a_ptrs += BLOCK_K * stride_dzm
        b_ptrs += BLOCK_K * stride_xm
    out = dw_ptr + offs_m.to(tl.int64)[:, None] * stride_dwm + offs_n[None, :]
    tl.store(out, acc.to(dw_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & n_ok)
    if pid_n == 0:  # db for this program's rows: the dz kernel's per-row-tile partial sums, in order
        db = tl.zeros((BLOCK_M,), dtype=tl.float32)
        for p in range(0, n_parts):
            db += tl.load(db_part_ptr + p * M + offs_m, mask=offs_m < M, other=0.0)
        tl.store(db_ptr + offs_m, db.to(db_ptr.dtype.element_ty), mask=offs_m < M)


def _rows(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, grad_out: torch.Tensor):
        k_in = x.shape[-1]
        x2 = _rows(x.reshape(-1, k_in))
        w2, b1 = _rows(w), _rows(b)
        n_out = w2.shape[0]
        g2 = _rows(grad_out.reshape(-1, n_out))
        tokens = x2.shape[0]
        dx = torch.empty((tokens, k_in), device=x.device, dtype=x.dtype)
        dw = torch.empty((n_out, k_in), device=x.device, dtype=w.dtype)
        db = torch.empty((n_out,), device=x.device, dtype=b.dtype)
        if tokens == 0 or n_out == 0 or k_in == 0:  # degenerate sizes: zero gradients, no launch
            return dx.fill_(0).reshape(x.shape), dw.fill_(0), db.fill_(0)
        n_pad = triton.cdiv(n_out, 8) * 8
        dz = torch.empty((tokens, n_pad), device=x.device, dtype=x.dtype)
        n_parts = triton.cdiv(tokens, BLOCK_M)
        db_part = torch.empty((n_parts, n_out), device=x.device, dtype=torch.float32)
        meta = dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=NUM_WARPS,
                    num_stages=NUM_STAGES)
        grid = (n_parts * triton.cdiv(n_out, BLOCK_N),)
        _dz_kernel[grid](x2, w2, b1, g2, dz, db_part, tokens, n_out, k_in, n_pad, x2.stride(0), w2.stride(0),
                         g2.stride(0), dz.stride(0), ALIGN=math.gcd(8, k_in, x2.stride(0), w2.stride(0)),
                         ALIGN_G=math.gcd(8, g2.stride(0)), **meta)
        grid = (triton.cdiv(tokens, BLOCK_M) * triton.cdiv(k_in, BLOCK_N),)
        _dx_kernel[grid](dz, w2, dx, tokens, k_in, n_out, n_pad, dz.stride(0), w2.stride(0), dx.stride(0),
                         ALIGN=math.gcd(8, k_in, w2.stride(0), dx.stride(0)), **meta)
        grid = (triton.cdiv(n_out, BLOCK_M) * triton.cdiv(k_in, BLOCK_N),)
        _dw_kernel[grid](dz, x2, db_part, dw, db, n_out, k_in, tokens, n_pad, n_parts, dz.stride(0), x2.stride(0),
                         dw.stride(0), ALIGN=math.gcd(8, k_in, x2.stride(0), dw.stride(0)), **meta)
        return dx.reshape(x.shape), dw, db
