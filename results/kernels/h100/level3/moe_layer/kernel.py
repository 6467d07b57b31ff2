"""H100 reference kernel for level3/moe_layer: softmax top-k router, tokens grouped by expert on the device,
grouped SwiGLU GEMMs, weighted combine in fp32; five Triton kernels and no host synchronisation.

1. Router: each program takes BLOCK_T tokens, computes their logits x @ router^T on the tensor cores (fp32
   accumulator, experts padded to a power of two >= 16), an fp32 softmax, the top-k by repeated arg-max
   (lowest index on ties) and the renormalised weights; it adds its per-expert counts to a global
   histogram with one atomic per expert.
2. Schedule: each program takes SCHED_CHUNK (token, slot) assignments, rebuilds the exclusive prefix sum of
   the expert counts padded to the GEMM row tile (so that every row tile belongs to one expert), ranks its
   assignments within their expert with a cumulative sum over a one-hot matrix, reserves its rows with one
   atomic per expert on a cursor, and writes each assignment's sorted row and each sorted row's token.
   Program 0 also writes the row-tile -> expert map. The order of rows inside an expert's segment depends
   on which program reserves first, but every output row is computed alone, so results are deterministic.
3. Gate/up: a grouped GEMM over a fixed worst-case schedule of cdiv(T*K, BLOCK_M) + E row tiles (tiles past
   the real count exit at once, so the host never reads the counts). A program gathers its rows of x by
   token index, streams the expert's gate and up weight tiles into two fp32 accumulators (the gathered x
   tile is loaded once for both) and writes h = silu(g) * u in bf16: gate and up never reach DRAM.
4. Down: the same schedule; h rows are contiguous per expert; y = h @ down[e]^T is stored in bf16 (the
   reference's rounding point) at the sorted row.
5. Combine: out[t] = sum_k w[t, k] * y[row(t, k)] in fp32, rounded to bf16 once: a gather with a fixed
   summation order instead of a scatter-add with atomics (deterministic, no zero-filled fp32 output).

The expert weights are read once per row tile of their expert (GROUP_M row tiles share a weight tile
through L2); the GEMMs run 128-wide tiles with BLOCK_K 64 and NUM_STAGES-deep pipelining, on wgmma.
When experts average fewer rows than BLOCK_M (many experts, few tokens) the row tile drops to
SMALL_BLOCK_M to waste less work on padding. Ragged edges: rows past an expert's count, columns past
N and a K tail are masked; offsets that can pass 2^31 are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

ROUTER_BLOCK_T = 64
ROUTER_BLOCK_K = 64
ROUTER_WARPS = 4
SCHED_CHUNK = 256
TILE_CHUNK = 256
SCHED_WARPS = 8
BLOCK_M = 128
SMALL_BLOCK_M = 64
BLOCK_N_GATE_UP = 128
BLOCK_N_DOWN = 256
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES_GATE_UP = 3
NUM_STAGES_DOWN = 3
COMBINE_BLOCK_T = 16
COMBINE_BLOCK_H = 256
COMBINE_WARPS = 4
TUNABLES = {
    "ROUTER_BLOCK_T": [32, 64, 128],
    "ROUTER_BLOCK_K": [32, 64, 128],
    "ROUTER_WARPS": [4, 8],
    "SCHED_CHUNK": [128, 256, 512],
    "TILE_CHUNK": [128, 256, 512],
    "SCHED_WARPS": [4, 8],
    "BLOCK_M": [64, 128],
    "SMALL_BLOCK_M": [32, 64],
    "BLOCK_N_GATE_UP": [64, 128],
    "BLOCK_N_DOWN": [128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES_GATE_UP": [2, 3, 4],
    "NUM_STAGES_DOWN": [2, 3, 4],
    "COMBINE_BLOCK_T": [8, 16, 32],
    "COMBINE_BLOCK_H": [128, 256, 512],
    "COMBINE_WARPS": [2, 4, 8],
}


@triton.jit
def _router_kernel(x_ptr, r_ptr, ids_ptr, w_ptr, counts_ptr, T, H, E, stride_xt, stride_re,
                   TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr, BLOCK_K: tl.constexpr,
                   BLOCK_TOPK: tl.constexpr):
    rt = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    re = tl.arange(0, BLOCK_E)
    rk = tl.arange(0, BLOCK_K)
    t_ok = rt < T
    e_ok = re < E
    x_ptrs = x_ptr + (rt % T).to(tl.int64)[:, None] * stride_xt + rk[None, :]
    r_ptrs = r_ptr + (re % E).to(tl.int64)[:, None] * stride_re + rk[None, :]
    logits = tl.zeros((BLOCK_T, BLOCK_E), dtype=tl.float32)
    for k0 in range(0, H, BLOCK_K):
        k_ok = rk[None, :] < H - k0
        a = tl.load(x_ptrs, mask=k_ok, other=0.0)
        r = tl.load(r_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        logits = tl.dot(a, tl.trans(r), logits)
        x_ptrs += BLOCK_K
        r_ptrs += BLOCK_K
    logits = tl.where(e_ok[None, :], logits, float("-inf"))
    m = tl.max(logits, axis=1)
    p = tl.exp(logits - m[:, None])
    p = p / tl.sum(p, axis=1)[:, None]
    p = tl.where(e_ok[None, :], p, -1.0)
    slot = tl.arange(0, BLOCK_TOPK)
    top_ids = tl.zeros((BLOCK_T, BLOCK_TOPK), dtype=tl.int32)
    top_p = tl.zeros((BLOCK_T, BLOCK_TOPK), dtype=tl.float32)
    hist = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for k in tl.static_range(TOP_K):
        best = tl.max(p, axis=1)
        idx = tl.min(tl.where(p == best[:, None], re[None, :], BLOCK_E), axis=1)
        chosen = re[None, :] == idx[:, None]
        p = tl.where(chosen, -1.0, p)
        top_ids = tl.where(slot[None, :] == k, idx[:, None], top_ids)
        top_p = tl.where(slot[None, :] == k, best[:, None], top_p)
        hist += tl.sum((chosen & t_ok[:, None]).to(tl.int32), axis=0)
    top_w = top_p / tl.sum(top_p, axis=1)[:, None]  # unused slots hold 0
    out = rt.to(tl.int64)[:, None] * TOP_K + slot[None, :]
    ok = t_ok[:, None] & (slot[None, :] < TOP_K)
    tl.store(ids_ptr + out, top_ids, mask=ok)
    tl.store(w_ptr + out, top_w, mask=ok)
    tl.atomic_add(counts_ptr + re, hist, mask=e_ok)


@triton.jit
def _schedule_kernel(ids_ptr, counts_ptr, cursor_ptr, seg_ptr, tile_expert_ptr, row_of_ptr, token_of_ptr,
                     A, E, max_tiles, TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_E: tl.constexpr,
                     CHUNK: tl.constexpr, TILE_CHUNK: tl.constexpr):
    re = tl.arange(0, BLOCK_E)
    e_ok = re < E
    cnt = tl.load(counts_ptr + re, mask=e_ok, other=0)
    padded = (cnt + BLOCK_M - 1) // BLOCK_M * BLOCK_M
    seg = tl.cumsum(padded, axis=0) - padded  # first sorted row of each expert
    ra = tl.program_id(0) * CHUNK + tl.arange(0, CHUNK)
    a_ok = ra < A
    ids = tl.load(ids_ptr + ra, mask=a_ok, other=-1)
    onehot = (ids[:, None] == re[None, :]).to(tl.int32)
    local = tl.sum(onehot, axis=0)
    base = tl.atomic_add(cursor_ptr + re, local, mask=e_ok)  # rows already taken in each expert's segment
    base = tl.where(e_ok, base, 0)
    rank = tl.cumsum(onehot, axis=0) - onehot
    row = tl.sum(onehot * (rank + (seg + base)[None, :]), axis=1)
    tl.store(row_of_ptr + ra, row, mask=a_ok)
    tl.store(token_of_ptr + row, ra // TOP_K, mask=a_ok)
    if tl.program_id(0) == 0:
        tl.store(seg_ptr + re, seg, mask=e_ok)
        tile_end = (seg + padded) // BLOCK_M
        for t0 in range(0, max_tiles, TILE_CHUNK):
            rt = t0 + tl.arange(0, TILE_CHUNK)
            expert = tl.sum((tile_end[None, :] <= rt[:, None]).to(tl.int32), axis=1)
            tl.store(tile_expert_ptr + rt, tl.where(expert < E, expert, -1), mask=rt < max_tiles)


@triton.jit
def _tile_coords(pid, num_m, N, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    group = pid // width
    first_m = group * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def _gate_up_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, tile_expert_ptr, seg_ptr, counts_ptr, token_of_ptr,
                    num_tiles, N, K, stride_xt, stride_we, stride_wn, stride_hm,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), num_tiles, N, BLOCK_N, GROUP_M)
    e = tl.load(tile_expert_ptr + pid_m)
    if e < 0:
        return
    row_end = tl.load(seg_ptr + e) + tl.load(counts_ptr + e)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < row_end
    tok = tl.load(token_of_ptr + rm, mask=m_ok, other=0).to(tl.int64)
    cols = (rn % N).to(tl.int64)
    x_ptrs = x_ptr + tok[:, None] * stride_xt + rk[None, :]
    w_off = e.to(tl.int64) * stride_we + cols[:, None] * stride_wn + rk[None, :]
    g_ptrs = wg_ptr + w_off
    u_ptrs = wu_ptr + w_off
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
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    out = h_ptr + rm.to(tl.int64)[:, None] * stride_hm + rn[None, :]
    tl.store(out, h.to(h_ptr.dtype.element_ty), mask=m_ok[:, None] & (rn[None, :] < N))


@triton.jit
def _down_kernel(h_ptr, wd_ptr, y_ptr, tile_expert_ptr, seg_ptr, counts_ptr, num_tiles, N, K,
                 stride_hm, stride_we, stride_wn, stride_ym,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), num_tiles, N, BLOCK_N, GROUP_M)
    e = tl.load(tile_expert_ptr + pid_m)
    if e < 0:
        return
    row_end = tl.load(seg_ptr + e) + tl.load(counts_ptr + e)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < row_end
    rows = tl.where(m_ok, rm, pid_m * BLOCK_M).to(tl.int64)  # padding rows re-read the tile's first row
    cols = (rn % N).to(tl.int64)
    a_ptrs = h_ptr + rows[:, None] * stride_hm + rk[None, :]
    w_ptrs = wd_ptr + e.to(tl.int64) * stride_we + cols[:, None] * stride_wn + rk[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = rk[None, :] < K - k0
        a = tl.load(a_ptrs, mask=k_ok, other=0.0)
        w = tl.load(w_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        acc = tl.dot(a, tl.trans(w), acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    out = y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :]
    tl.store(out, acc.to(y_ptr.dtype.element_ty), mask=m_ok[:, None] & (rn[None, :] < N))


@triton.jit
def _combine_kernel(y_ptr, row_of_ptr, w_ptr, out_ptr, T, H, stride_ym, stride_ot,
                    TOP_K: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_H: tl.constexpr):
    rt = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    t_ok = rt < T
    ok = t_ok[:, None] & (rh[None, :] < H)
    acc = tl.zeros((BLOCK_T, BLOCK_H), dtype=tl.float32)
    for k in tl.static_range(TOP_K):
        slot = rt.to(tl.int64) * TOP_K + k
        row = tl.load(row_of_ptr + slot, mask=t_ok, other=0).to(tl.int64)
        w = tl.load(w_ptr + slot, mask=t_ok, other=0.0)
        y = tl.load(y_ptr + row[:, None] * stride_ym + rh[None, :], mask=ok, other=0.0).to(tl.float32)
        acc += y * w[:, None]
    tl.store(out_ptr + rt.to(tl.int64)[:, None] * stride_ot + rh[None, :], acc.to(out_ptr.dtype.element_ty),
             mask=ok)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, ffn: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        dt = torch.bfloat16
        self.router = nn.Parameter(torch.empty(experts, hidden, dtype=dt))
        self.gate = nn.Parameter(torch.empty(experts, ffn, hidden, dtype=dt))
        self.up = nn.Parameter(torch.empty(experts, ffn, hidden, dtype=dt))
        self.down = nn.Parameter(torch.empty(experts, hidden, ffn, dtype=dt))
        for p in self.parameters():
            nn.init.normal_(p, std=hidden**-0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        router = self.router.detach().contiguous()
        wg = self.gate.detach().contiguous()
        wu = self.up.detach().contiguous()
        wd = self.down.detach().contiguous()
        T, H = x2.shape
        E, F = wg.shape[0], wg.shape[1]
        K = self.top_k
        dev = x2.device
        A = T * K
        block_e = max(16, triton.next_power_of_2(E))
        bm = BLOCK_M if A >= E * BLOCK_M else SMALL_BLOCK_M
        max_tiles = triton.cdiv(A, bm) + E  # worst case over every routing: each expert adds < 1 padded tile
        rows = max_tiles * bm

        ids = torch.empty((T, K), device=dev, dtype=torch.int32)
        weights = torch.empty((T, K), device=dev, dtype=torch.float32)
        scratch = torch.zeros((2, E), device=dev, dtype=torch.int32)  # expert counts, row cursors
        counts, cursor = scratch[0], scratch[1]
        _router_kernel[(triton.cdiv(T, ROUTER_BLOCK_T),)](
            x2, router, ids, weights, counts, T, H, E, x2.stride(0), router.stride(0),
            TOP_K=K, BLOCK_T=ROUTER_BLOCK_T, BLOCK_E=block_e, BLOCK_K=ROUTER_BLOCK_K,
            BLOCK_TOPK=triton.next_power_of_2(K), num_warps=ROUTER_WARPS)

        seg = torch.empty((E,), device=dev, dtype=torch.int32)
        tile_expert = torch.empty((max_tiles,), device=dev, dtype=torch.int32)
        row_of = torch.empty((A,), device=dev, dtype=torch.int32)
        token_of = torch.empty((rows,), device=dev, dtype=torch.int32)
        _schedule_kernel[(triton.cdiv(A, SCHED_CHUNK),)](
            ids, counts, cursor, seg, tile_expert, row_of, token_of, A, E, max_tiles,
            TOP_K=K, BLOCK_M=bm, BLOCK_E=block_e, CHUNK=SCHED_CHUNK, TILE_CHUNK=TILE_CHUNK, num_warps=SCHED_WARPS)

        h = torch.empty((rows, F), device=dev, dtype=x2.dtype)
        grid = (max_tiles * triton.cdiv(F, BLOCK_N_GATE_UP),)
        _gate_up_kernel[grid](x2, wg, wu, h, tile_expert, seg, counts, token_of, max_tiles, F, H,
                              x2.stride(0), wg.stride(0), wg.stride(1), h.stride(0),
                              BLOCK_M=bm, BLOCK_N=BLOCK_N_GATE_UP, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                              num_warps=NUM_WARPS, num_stages=NUM_STAGES_GATE_UP)

        y = torch.empty((rows, H), device=dev, dtype=x2.dtype)
        grid = (max_tiles * triton.cdiv(H, BLOCK_N_DOWN),)
        _down_kernel[grid](h, wd, y, tile_expert, seg, counts, max_tiles, H, F,
                           h.stride(0), wd.stride(0), wd.stride(1), y.stride(0),
                           BLOCK_M=bm, BLOCK_N=BLOCK_N_DOWN, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                           num_warps=NUM_WARPS, num_stages=NUM_STAGES_DOWN)

        out = torch.empty((T, H), device=dev, dtype=x2.dtype)
        grid = (triton.cdiv(T, COMBINE_BLOCK_T), triton.cdiv(H, COMBINE_BLOCK_H))
        _combine_kernel[grid](y, row_of, weights, out, T, H, y.stride(0), out.stride(0),
                              TOP_K=K, BLOCK_T=COMBINE_BLOCK_T, BLOCK_H=COMBINE_BLOCK_H, num_warps=COMBINE_WARPS)
        return out.view(shape)
