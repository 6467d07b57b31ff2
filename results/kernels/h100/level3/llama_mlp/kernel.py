"""H100 reference kernel for level3/llama_mlp: down(silu(gate(x)) * up(x)) in bf16, as two Triton GEMMs.

Kernel 1 computes the gate and up projections together: each program owns a BLOCK_M x BLOCK_N tile of
the FFN activations, streams one x tile and the matching gate and up weight tiles per BLOCK_K step
(the x tile is loaded once for both products) into two fp32 accumulators on the tensor cores (tl.dot
lowers to wgmma on sm_90a), and its epilogue writes h = silu(g) * u once, rounded to bf16: the gate and
up outputs never reach DRAM, so the only intermediate traffic is h itself (TOKENS x FFN bf16, written
once, read once). Kernel 2 is the down GEMM h @ Wd^T with fp32 accumulation and a bf16 store.

Programs are ordered in groups of GROUP_M row tiles so that a weight tile is reused from L2 by the
GROUP_M row tiles that need it; 128-wide tiles with BLOCK_K 64 and NUM_STAGES-deep software pipelining
keep the tensor cores fed (the arithmetic intensity of a 128x128x64 step is 64 flop/byte of shared
memory). Decode-sized batches (TOKENS <= DECODE_BLOCK_M) use DECODE_BLOCK_M-row tiles, and when the down
GEMM has too few output tiles to fill the GPU (decode: 64 x 8192 over K = 28672) it splits K across
programs into an fp32 workspace that a small kernel sums in a fixed order (deterministic, no atomics).

Edge cases: rows and columns past the matrix are clamped on load (modulo the size, so the inner loop
needs no row masks) and masked on store; a ragged K tail is masked with zeros. Offsets are int64.
Weights may be bf16 or fp32 parameters (cast to the activation dtype in the kernel, before tl.dot).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N_GATE_UP = 128  # two accumulators (gate and up) per program
BLOCK_N_DOWN = 256
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES_GATE_UP = 3
NUM_STAGES_DOWN = 3
DECODE_BLOCK_M = 64
SPLIT_K_TARGET_PROGRAMS = 264  # about two programs per SM on a 132-SM H100
REDUCE_BLOCK = 1024
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N_GATE_UP": [64, 128],
    "BLOCK_N_DOWN": [128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES_GATE_UP": [2, 3, 4],
    "NUM_STAGES_DOWN": [2, 3, 4],
    "DECODE_BLOCK_M": [16, 32, 64],
    "SPLIT_K_TARGET_PROGRAMS": [132, 264, 528],
    "REDUCE_BLOCK": [512, 1024, 2048],
}


@triton.jit
def _tile_coords(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row tiles walk the column tiles together (weight tiles stay in L2)."""
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def _gate_up_silu_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K, stride_xm, stride_wg, stride_wu, stride_hm,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows = (rm % M).to(tl.int64)  # clamped: out-of-range rows recompute a valid row, never stored
    cols = (rn % N).to(tl.int64)
    x_ptrs = x_ptr + rows[:, None] * stride_xm + rk[None, :]
    g_ptrs = wg_ptr + cols[:, None] * stride_wg + rk[None, :]
    u_ptrs = wu_ptr + cols[:, None] * stride_wu + rk[None, :]
    acc_g = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc_u = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = rk[None, :] < K - k0
        a = tl.load(x_ptrs, mask=k_ok, other=0.0)
        bg = tl.load(g_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        bu = tl.load(u_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        acc_g = tl.dot(a, tl.trans(bg), acc_g)
        acc_u = tl.dot(a, tl.trans(bu), acc_u)
        x_ptrs += BLOCK_K
        g_ptrs += BLOCK_K
        u_ptrs += BLOCK_K
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u  # silu(g) * u in fp32, rounded once on store
    out = h_ptr + rm[:, None].to(tl.int64) * stride_hm + rn[None, :]
    tl.store(out, h.to(h_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _linear_kernel(a_ptr, w_ptr, c_ptr, M, N, K, k_per_split, stride_am, stride_wn, stride_cm, stride_cs,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C[split] = A[:, ks] @ W[:, ks]^T over this program's K range (the whole K without split-K)."""
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    split = tl.program_id(1)
    k_start = split * k_per_split
    k_end = tl.minimum(K, k_start + k_per_split)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows = (rm % M).to(tl.int64)
    cols = (rn % N).to(tl.int64)
    a_ptrs = a_ptr + rows[:, None] * stride_am + (k_start + rk)[None, :]
    w_ptrs = w_ptr + cols[:, None] * stride_wn + (k_start + rk)[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k_ok = rk[None, :] < k_end - k0
        a = tl.load(a_ptrs, mask=k_ok, other=0.0)
        w = tl.load(w_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        acc = tl.dot(a, tl.trans(w), acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    out = c_ptr + split.to(tl.int64) * stride_cs + rm[:, None].to(tl.int64) * stride_cm + rn[None, :]
    tl.store(out, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _split_k_reduce_kernel(ws_ptr, c_ptr, total, splits, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(0, splits):
        acc += tl.load(ws_ptr + s * total + offs, mask=ok, other=0.0)
    tl.store(c_ptr + offs, acc.to(c_ptr.dtype.element_ty), mask=ok)


def _gate_up(x2, wg, wu):
    M, K = x2.shape
    N = wg.shape[0]
    h = torch.empty((M, N), device=x2.device, dtype=x2.dtype)
    bm = DECODE_BLOCK_M if M <= DECODE_BLOCK_M else BLOCK_M
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, BLOCK_N_GATE_UP),)
    _gate_up_silu_kernel[grid](x2, wg, wu, h, M, N, K, x2.stride(0), wg.stride(0), wu.stride(0), h.stride(0),
                               BLOCK_M=bm, BLOCK_N=BLOCK_N_GATE_UP, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                               num_warps=NUM_WARPS, num_stages=NUM_STAGES_GATE_UP)
    return h


def _linear(a, w):
    M, K = a.shape
    N = w.shape[0]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    bm = DECODE_BLOCK_M if M <= DECODE_BLOCK_M else BLOCK_M
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, BLOCK_N_DOWN)
    k_steps = triton.cdiv(K, BLOCK_K)
    # Split K only when the output tiles cannot fill the GPU; keep at least 4 K steps per split.
    split = max(1, min(SPLIT_K_TARGET_PROGRAMS // tiles, k_steps // 4))
    k_per_split = triton.cdiv(k_steps, split) * BLOCK_K
    split = triton.cdiv(K, k_per_split)
    target = out if split == 1 else torch.empty((split, M, N), device=a.device, dtype=torch.float32)
    stride_s = 0 if split == 1 else target.stride(0)
    _linear_kernel[(tiles, split)](a, w, target, M, N, K, k_per_split, a.stride(0), w.stride(0), N, stride_s,
                                   BLOCK_M=bm, BLOCK_N=BLOCK_N_DOWN, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                                   num_warps=NUM_WARPS, num_stages=NUM_STAGES_DOWN)
    if split > 1:
        total = M * N
        _split_k_reduce_kernel[(triton.cdiv(total, REDUCE_BLOCK),)](target, out, total, split, BLOCK=REDUCE_BLOCK,
                                                                     num_warps=4)
    return out


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn: int):
        super().__init__()
        self.gate = nn.Linear(hidden, ffn, bias=False, dtype=torch.bfloat16)
        self.up = nn.Linear(hidden, ffn, bias=False, dtype=torch.bfloat16)
        self.down = nn.Linear(ffn, hidden, bias=False, dtype=torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        wg = self.gate.weight.detach().contiguous()
        wu = self.up.weight.detach().contiguous()
        wd = self.down.weight.detach().contiguous()
        h = _gate_up(x2, wg, wu)
        out = _linear(h, wd)
        return out.view(*shape[:-1], wd.shape[0])
