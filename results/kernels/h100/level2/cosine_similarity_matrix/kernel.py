"""H100 reference kernel for level2/cosine_similarity_matrix: out = normalize(q) @ normalize(k)^T * exp(log_t)
in fp16, with the normalisation moved out of the GEMM's operands into its epilogue.

Since normalize(q_i) . normalize(k_j) = (q_i . k_j) / (|q_i| |k_j|), no normalised copy of q or k is
ever written. (1) A row-norm pre-pass (NORM_ROWS rows per program, the feature dimension walked in
NORM_BLOCK_D chunks, fp32 sums of squares) writes 1 / max(|row|, 1e-12) for every query and key row
(4 bytes per row; F.normalize's eps). (2) A grouped-tile GEMM (BLOCK_M x BLOCK_N tiles over queries x
keys, fp16 wgmma with an fp32 accumulator, NUM_STAGES-deep cp.async pipeline, GROUP_M row tiles per
group for L2 reuse) takes the raw fp16 embeddings as operands and, in the epilogue, multiplies the
accumulator by inv_q[i] * inv_k[j] * exp(log_t) (the temperature read from its parameter on the
device), then stores fp16 once. This is at least as accurate as the reference's fp16 rounding of the
normalised rows. DRAM traffic: q and k read twice (norms, GEMM: about 2% of the output's bytes at the
task's shapes) and the (QUERIES x KEYS) output written once, which dominates; 3 stages keep the
shared memory at 96 KiB so that two programs fit on an SM and one's epilogue stores overlap the
other's main loop (the feature dimension is short: 8-16 K steps). Ragged edges: rows past QUERIES /
KEYS are wrapped onto valid ones for the loads (never stored), feature tails are zero-masked, the
store is masked; offsets are int64.
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
NUM_STAGES = 3
NUM_WARPS = 8
NORM_ROWS = 8
NORM_BLOCK_D = 256
NORM_NUM_WARPS = 4
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64, 128],
    "GROUP_M": [4, 8, 16],
    "NUM_STAGES": [2, 3, 4],
    "NUM_WARPS": [4, 8],
    "NORM_ROWS": [4, 8, 16, 32],
    "NORM_BLOCK_D": [128, 256, 512],
    "NORM_NUM_WARPS": [2, 4, 8],
}
NORM_EPS = 1e-12


@triton.jit
def _inv_norm_kernel(x_ptr, inv_ptr, R, D, stride_xm, eps, ROWS: tl.constexpr, BLOCK_D: tl.constexpr,
                     ALIGN: tl.constexpr):
    # ALIGN divides D and the row stride (host-checked): stated so that rows get 16-byte loads.
    D = (D // ALIGN) * ALIGN
    stride_xm = (stride_xm // ALIGN) * ALIGN
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    base = x_ptr + (rows % R).to(tl.int64)[:, None] * stride_xm
    cols = tl.arange(0, BLOCK_D)
    ss = tl.zeros((ROWS, BLOCK_D), dtype=tl.float32)
    for start in range(0, D, BLOCK_D):
        c = start + cols
        x = tl.load(base + c[None, :], mask=c[None, :] < D, other=0.0).to(tl.float32)
        ss += x * x
    norm = tl.sqrt(tl.sum(ss, axis=1))
    tl.store(inv_ptr + rows, 1.0 / tl.maximum(norm, eps), mask=rows < R)


@triton.jit
def _cosine_matrix_kernel(q_ptr, k_ptr, inv_q_ptr, inv_k_ptr, logt_ptr, out_ptr, M, N, K, stride_qm, stride_kn,
                          stride_om, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                          GROUP_M: tl.constexpr, ALIGN: tl.constexpr, ALIGN_O: tl.constexpr):
    # ALIGN (ALIGN_O): a power of two <= 8 dividing K and the operands' row strides (the output's row
    # stride), host-checked. Rewriting them as multiples of it (an identity) tells the compiler so, for
    # 16-byte cp.async loads (tl.multiple_of on scalar arguments does not reach the alignment analysis).
    K = (K // ALIGN) * ALIGN
    stride_qm = (stride_qm // ALIGN) * ALIGN
    stride_kn = (stride_kn // ALIGN) * ALIGN
    stride_om = (stride_om // ALIGN_O) * ALIGN_O
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
    rows = offs_m % M  # wrapped: loads need no row/column mask
    cols = offs_n % N
    a_ptrs = q_ptr + rows.to(tl.int64)[:, None] * stride_qm + offs_k[None, :]
    b_ptrs = k_ptr + cols.to(tl.int64)[None, :] * stride_kn + offs_k[:, None]

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        acc = tl.dot(a, b.to(a.dtype), acc)
        a_ptrs += BLOCK_K
        b_ptrs += BLOCK_K

    temperature = tl.exp(tl.load(logt_ptr).to(tl.float32))
    row_scale = tl.load(inv_q_ptr + rows) * temperature
    col_scale = tl.load(inv_k_ptr + cols)
    y = acc * row_scale[:, None] * col_scale[None, :]
    out = out_ptr + offs_m.to(tl.int64)[:, None] * stride_om + offs_n[None, :]
    tl.store(out, y.to(out_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.log_temperature = nn.Parameter((torch.tensor(2.3) + 0.1 * torch.randn(())).half())

    def _inv_norms(self, x2: torch.Tensor) -> torch.Tensor:
        r, d = x2.shape
        inv = torch.empty((r,), device=x2.device, dtype=torch.float32)
        _inv_norm_kernel[(triton.cdiv(r, NORM_ROWS),)](x2, inv, r, d, x2.stride(0), NORM_EPS, ROWS=NORM_ROWS,
                                                       BLOCK_D=NORM_BLOCK_D, ALIGN=math.gcd(8, d, x2.stride(0)),
                                                       num_warps=NORM_NUM_WARPS)
        return inv

    def forward(self, queries: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        d = queries.shape[-1]
        q2 = queries.reshape(-1, d)
        k2 = keys.reshape(-1, d)
        if q2.stride(-1) != 1:
            q2 = q2.contiguous()
        if k2.stride(-1) != 1:
            k2 = k2.contiguous()
        m, n = q2.shape[0], k2.shape[0]
        out = torch.empty((m, n), device=queries.device, dtype=queries.dtype)
        if m == 0 or n == 0:
            return out.reshape(*queries.shape[:-1], n)
        inv_q, inv_k = self._inv_norms(q2), self._inv_norms(k2)
        grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
        _cosine_matrix_kernel[grid](q2, k2, inv_q, inv_k, self.log_temperature.detach(), out, m, n, d, q2.stride(0),
                                    k2.stride(0), out.stride(0), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                                    GROUP_M=GROUP_M, ALIGN=math.gcd(8, d, q2.stride(0), k2.stride(0)),
                                    ALIGN_O=math.gcd(8, out.stride(0)), num_warps=NUM_WARPS, num_stages=NUM_STAGES)
        return out.reshape(*queries.shape[:-1], n)
