"""H100 reference kernel for level2/moe_router_topk: logits = x @ Wr^T (bf16 operands, fp32
accumulation), softmax over the experts, the top-k probabilities renormalised to sum to one, sorted
in descending order (fp32 values, as the reference returns).

Each GEMM program owns BLOCK_M tokens and all experts (padded to a power of two E_PAD, at least 16
for the tensor cores): x and Wr stream in BLOCK_K steps through NUM_STAGES shared-memory buffers
into `tl.dot` (wgmma on sm_90a) with an fp32 BLOCK_M x E_PAD accumulator. DRAM traffic is
essentially one read of x, the minimum for this memory-bound op; the router weight (at most
256 x 7168 bf16, 3.7 MB) stays in L2 but is re-read from there once per token tile, which is why
tiles are as tall as the accumulator allows. When the token tiles alone would leave the GPU idle
(fewer than TARGET_PROGRAMS), K is split across SPLIT programs (each at least MIN_SPLIT_K long)
that store fp32 partial logits, and a small second kernel sums them; otherwise the routing runs in
the GEMM's epilogue and the logits never reach memory. Routing: padded experts are set to -inf,
Triton's bitonic `tl.topk` picks each row's K_PAD largest logits in registers (K_PAD = top_k
rounded up to a power of two), and since softmax followed by renormalisation over the selected
experts equals exp(l_i - l_max) / sum over selected of exp(l_j - l_max), the softmax denominator
cancels and is never computed. Only the first top_k weights are stored. Ragged tokens, experts and
K are masked; the router parameter may be bf16 or fp32 (cast to bf16 as it is loaded); offsets
are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # tokens per GEMM program
BLOCK_K = 64
NUM_STAGES = 4
NUM_WARPS = 4  # warps for small accumulators; 8 once BLOCK_M x E_PAD reaches 128 x 128
TARGET_PROGRAMS = 128  # split K when fewer token tiles than this (about one per H100 SM)
MIN_SPLIT_K = 512  # shortest K range of one split
FINISH_BLOCK_M = 32  # tokens per program of the split-K finishing kernel
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_K": [32, 64, 128],
    "NUM_STAGES": [3, 4],
    "NUM_WARPS": [4, 8],
    "TARGET_PROGRAMS": [0, 128, 264],
    "MIN_SPLIT_K": [256, 512, 1024],
    "FINISH_BLOCK_M": [16, 32, 64],
}


@triton.jit
def _route(logits, rm, m_ok, e_ok, out_ptr, stride_om, top_k, K_PAD: tl.constexpr):
    logits = tl.where(e_ok[None, :], logits, float("-inf"))
    top = tl.topk(logits, K_PAD)  # [rows, K_PAD], descending
    j = tl.arange(0, K_PAD)
    keep = j[None, :] < top_k
    p = tl.where(keep, tl.exp(top - tl.max(logits, axis=1)[:, None]), 0.0)
    p = p / tl.sum(p, axis=1)[:, None]
    tl.store(out_ptr + rm[:, None] * stride_om + j[None, :], p, mask=m_ok[:, None] & keep)


@triton.jit
def _router_gemm_kernel(x_ptr, w_ptr, out_ptr, part_ptr, M, K, E, top_k, k_per_split,
                        stride_xm, stride_xk, stride_we, stride_wk, stride_om,
                        BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, E_PAD: tl.constexpr, K_PAD: tl.constexpr,
                        SPLIT: tl.constexpr):
    split = tl.program_id(1)
    rm = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    re = tl.arange(0, E_PAD)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    e_ok = re < E
    k_start = split * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    x_ptrs = x_ptr + rm[:, None] * stride_xm + (k_start + rk[None, :]) * stride_xk
    w_ptrs = w_ptr + (k_start + rk[:, None]) * stride_wk + re[None, :].to(tl.int64) * stride_we  # K x E view
    acc = tl.zeros((BLOCK_M, E_PAD), tl.float32)
    for k0 in range(k_start, k_end, BLOCK_K):
        k_ok = rk < k_end - k0
        a = tl.load(x_ptrs, mask=m_ok[:, None] & k_ok[None, :], other=0.0).to(tl.bfloat16)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & e_ok[None, :], other=0.0).to(tl.bfloat16)
        acc = tl.dot(a, b, acc)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    if SPLIT:
        # partial logits of this K range: part[split, m, e], fp32
        dst = part_ptr + (split.to(tl.int64) * M + rm[:, None]) * E + re[None, :]
        tl.store(dst, acc, mask=m_ok[:, None] & e_ok[None, :])
    else:
        _route(acc, rm, m_ok, e_ok, out_ptr, stride_om, top_k, K_PAD)


@triton.jit
def _router_finish_kernel(part_ptr, out_ptr, M, E, top_k, n_split, stride_om,
                          BLOCK_M: tl.constexpr, E_PAD: tl.constexpr, K_PAD: tl.constexpr):
    rm = (tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    re = tl.arange(0, E_PAD)
    m_ok = rm < M
    e_ok = re < E
    mask = m_ok[:, None] & e_ok[None, :]
    logits = tl.zeros((BLOCK_M, E_PAD), tl.float32)
    for s in range(0, n_split):
        logits += tl.load(part_ptr + (s * M + rm[:, None]) * E + re[None, :], mask=mask, other=0.0)
    _route(logits, rm, m_ok, e_ok, out_ptr, stride_om, top_k, K_PAD)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.router = nn.Parameter((torch.randn(experts, hidden) * 2.0 * hidden**-0.5).to(torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.router
        experts, hidden = w.shape
        x2 = x.reshape(-1, hidden)
        m = x2.shape[0]
        k = self.top_k
        out = torch.empty((m, k), device=x.device, dtype=torch.float32)
        if m == 0 or k == 0:
            return out.view(*x.shape[:-1], k)
        e_pad = max(16, triton.next_power_of_2(experts))
        k_pad = triton.next_power_of_2(k)
        tiles = triton.cdiv(m, BLOCK_M)
        split = 1
        if tiles < TARGET_PROGRAMS:
            split = max(1, min(triton.cdiv(TARGET_PROGRAMS, tiles), hidden // MIN_SPLIT_K))
        k_per_split = triton.cdiv(triton.cdiv(max(hidden, 1), split), BLOCK_K) * BLOCK_K
        split = triton.cdiv(max(hidden, 1), k_per_split)
        warps = NUM_WARPS if BLOCK_M * e_pad < 128 * 128 else max(NUM_WARPS, 8)
        partials = torch.empty((split, m, experts), device=x.device, dtype=torch.float32) if split > 1 else out
        _router_gemm_kernel[(tiles, split)](
            x2, w, out, partials, m, hidden, experts, k, k_per_split,
            x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), out.stride(0),
            BLOCK_M=BLOCK_M, BLOCK_K=BLOCK_K, E_PAD=e_pad, K_PAD=k_pad, SPLIT=split > 1,
            num_warps=warps, num_stages=NUM_STAGES)
        if split > 1:
            _router_finish_kernel[(triton.cdiv(m, FINISH_BLOCK_M),)](
                partials, out, m, experts, k, split, out.stride(0),
                BLOCK_M=FINISH_BLOCK_M, E_PAD=e_pad, K_PAD=k_pad, num_warps=4)
        return out.view(*x.shape[:-1], k)
