"""H100 reference kernel for level3/llama_decoder_layer: a Llama-3 decoder layer in bf16 as eight Triton
launches: RMSNorm, QKV GEMM, RoPE (in place on q and k), GQA causal flash attention, o GEMM (+residual),
RMSNorm, gate/up GEMM with a fused SwiGLU epilogue, down GEMM (+residual).

GEMMs: one BLOCK_M x BLOCK_N output tile per program, BLOCK_K 64, NUM_STAGES-deep software pipelining,
bf16 operands on the tensor cores (wgmma on sm_90a) with fp32 accumulators, programs ordered in groups
of GROUP_M row tiles so that weight tiles are reused from L2. Residual adds happen in the epilogue on
the fp32 accumulator (rounded to bf16 once). The gate and up projections share each loaded tile of the
normalised rows between two accumulators and write only silu(g) * u, so gate and up never reach DRAM.
RMSNorm: one program per row, the row in registers, fp32 statistics, one read and one write.
RoPE: programs of ROPE_BLOCK_T tokens x ROPE_HEADS heads rotate q and k in place in the QKV output;
the angle table (position x inverse frequency, in fp32, precise sin/cos) is built once per program and
reused for its heads, so the pass is a single read and write of q and k.
Attention: flash-attention style, one program per (BLOCK_M queries, batch * query head), reading q, k,
v in place from the QKV output (kv head = query head // group, no repeat_interleave: the group's query
heads run next to each other and share k/v tiles through L2); online softmax in fp32 with exp2 and the
scale folded in, P cast to bf16 for P @ V on the tensor cores, output written in the [tokens, heads * d]
layout the o GEMM reads. Key blocks below the diagonal run without masks; the longest query blocks start
first.
The residual stream h = x + attention is kept in fp32 (written by the o GEMM's epilogue, read by the
RMSNorm and by the down GEMM's epilogue): 2 extra bytes per element over three passes, a small price for
removing the bf16 rounding of h, which otherwise dominates the error where the MLP output cancels h.
Edge cases: rows/columns past the matrix are clamped on load and masked on store, K tails, head dims that
are not a power of two and sequence ends are masked; offsets are int64.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 256  # QKV GEMM
BLOCK_N_RES = 128  # o and down GEMMs (residual epilogue)
BLOCK_N_GATE_UP = 128  # two accumulators per program
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
ATTN_BLOCK_M = 128
ATTN_BLOCK_N = 64
ATTN_WARPS = 8
ATTN_STAGES = 3
NORM_WARPS = 8
ROPE_BLOCK_T = 32
ROPE_HEADS = 8
ROPE_WARPS = 4
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [128, 256],
    "BLOCK_N_RES": [64, 128, 256],
    "BLOCK_N_GATE_UP": [64, 128],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "ATTN_BLOCK_M": [64, 128],
    "ATTN_BLOCK_N": [32, 64],  # must divide ATTN_BLOCK_M
    "ATTN_WARPS": [4, 8],
    "ATTN_STAGES": [2, 3, 4],
    "NORM_WARPS": [4, 8, 16],
    "ROPE_BLOCK_T": [16, 32, 64],
    "ROPE_HEADS": [4, 8, 16],
    "ROPE_WARPS": [4, 8],
}


@triton.jit
def _rms_norm_kernel(x_ptr, w_ptr, out_ptr, H, stride_x, stride_o, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _tile_coords(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
    return pid_m, pid_n


@triton.jit
def _linear_kernel(a_ptr, w_ptr, res_ptr, c_ptr, M, N, K, stride_am, stride_wn, stride_rm, stride_cm,
                   HAS_RES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr):
    """C = A @ W^T (+ residual)."""
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + (rm % M).to(tl.int64)[:, None] * stride_am + rk[None, :]
    w_ptrs = w_ptr + (rn % N).to(tl.int64)[:, None] * stride_wn + rk[None, :]
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = rk[None, :] < K - k0
        a = tl.load(a_ptrs, mask=k_ok, other=0.0)
        w = tl.load(w_ptrs, mask=k_ok, other=0.0).to(a.dtype)
        acc = tl.dot(a, tl.trans(w), acc)
        a_ptrs += BLOCK_K
        w_ptrs += BLOCK_K
    ok = (rm[:, None] < M) & (rn[None, :] < N)
    if HAS_RES:
        res = tl.load(res_ptr + rm.to(tl.int64)[:, None] * stride_rm + rn[None, :], mask=ok, other=0.0)
        acc += res.to(tl.float32)
    tl.store(c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _gate_up_silu_kernel(x_ptr, wg_ptr, wu_ptr, h_ptr, M, N, K, stride_xm, stride_wg, stride_wu, stride_hm,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                         GROUP_M: tl.constexpr):
    pid_m, pid_n = _tile_coords(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows = (rm % M).to(tl.int64)
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
    h = acc_g / (1.0 + tl.exp(-acc_g)) * acc_u
    out = h_ptr + rm[:, None].to(tl.int64) * stride_hm + rn[None, :]
    tl.store(out, h.to(h_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def _rope_kernel(qk_ptr, T, S, n_heads, stride_t, log2_theta, HEAD_D: tl.constexpr, BLOCK_HALF: tl.constexpr,
                 BLOCK_T: tl.constexpr, HEADS: tl.constexpr):
    """Rotate heads [HEADS * pid1, ...) of BLOCK_T tokens in place: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s)."""
    HALF: tl.constexpr = HEAD_D // 2
    rt = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)
    rj = tl.arange(0, BLOCK_HALF)
    ok = (rt[:, None] < T) & (rj[None, :] < HALF)
    pos = (rt % S).to(tl.float32)
    inv_freq = 1.0 / tl.exp2((2 * rj).to(tl.float32) / HEAD_D * log2_theta)
    angle = pos[:, None] * inv_freq[None, :]
    c = tl.cos(angle)
    s = tl.sin(angle)
    base = qk_ptr + rt.to(tl.int64)[:, None] * stride_t + rj[None, :]
    h0 = tl.program_id(1) * HEADS
    for i in range(0, HEADS):
        h = h0 + i
        if h < n_heads:
            p1 = base + h * HEAD_D
            x1 = tl.load(p1, mask=ok, other=0.0).to(tl.float32)
            x2 = tl.load(p1 + HALF, mask=ok, other=0.0).to(tl.float32)
            tl.store(p1, (x1 * c - x2 * s).to(qk_ptr.dtype.element_ty), mask=ok)
            tl.store(p1 + HALF, (x2 * c + x1 * s).to(qk_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _flash_attn_kernel(q_ptr, k_ptr, v_ptr, o_ptr, S, heads, group, stride_qt, stride_kt, stride_vt, stride_ot,
                       qk_scale, HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                       BLOCK_N: tl.constexpr):
    """Causal attention for one block of queries of one (batch, head); kv head = head // group."""
    pid_m = tl.num_programs(0) - 1 - tl.program_id(0)  # longest rows first
    bh = tl.program_id(1)
    b = bh // heads
    h = bh % heads
    kvh = h // group
    tok0 = b.to(tl.int64) * S
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    rd = tl.arange(0, BLOCK_D)
    d_ok = rd[None, :] < HEAD_D
    q_rows = (tok0 + rm)[:, None] * stride_qt
    q = tl.load(q_ptr + q_rows + h * HEAD_D + rd[None, :], mask=(rm[:, None] < S) & d_ok, other=0.0)
    k_base = k_ptr + tok0 * stride_kt + kvh * HEAD_D + rd[None, :]
    v_base = v_ptr + tok0 * stride_vt + kvh * HEAD_D + rd[None, :]
    m_i = tl.full((BLOCK_M,), float("-inf"), dtype=tl.float32)
    l_i = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    diag = pid_m * BLOCK_M
    # Key blocks entirely below the diagonal: every key is visible to every query row.
    for n0 in range(0, diag, BLOCK_N):
        kn = (n0 + rn).to(tl.int64)[:, None]
        k = tl.load(k_base + kn * stride_kt, mask=d_ok, other=0.0)
        v = tl.load(v_base + kn * stride_vt, mask=d_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    # Diagonal blocks: causal and sequence-end masks.
    for n0 in range(diag, tl.minimum(diag + BLOCK_M, S), BLOCK_N):
        cols = n0 + rn
        kn = cols.to(tl.int64)[:, None]
        kv_ok = (cols[:, None] < S) & d_ok
        k = tl.load(k_base + kn * stride_kt, mask=kv_ok, other=0.0)
        v = tl.load(v_base + kn * stride_vt, mask=kv_ok, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where((cols[None, :] <= rm[:, None]) & (cols[None, :] < S), s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp2(s - m_new[:, None])
        alpha = tl.exp2(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / l_i[:, None]
    o_ptrs = o_ptr + (tok0 + rm)[:, None] * stride_ot + h * HEAD_D + rd[None, :]
    tl.store(o_ptrs, out.to(o_ptr.dtype.element_ty), mask=(rm[:, None] < S) & d_ok)


def _rms_norm(x2, weight, out_dtype=None):
    M, H = x2.shape
    out = torch.empty((M, H), device=x2.device, dtype=out_dtype or x2.dtype)
    _rms_norm_kernel[(M,)](x2, weight, out, H, x2.stride(0), out.stride(0), 1e-5,
                           BLOCK_H=triton.next_power_of_2(H), num_warps=NORM_WARPS)
    return out


def _linear(a, w, residual=None, out_dtype=None):
    M, K = a.shape
    N = w.shape[0]
    out = torch.empty((M, N), device=a.device, dtype=out_dtype or a.dtype)
    res = residual if residual is not None else out
    bn = BLOCK_N if residual is None else BLOCK_N_RES
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, bn),)
    _linear_kernel[grid](a, w, res, out, M, N, K, a.stride(0), w.stride(0), res.stride(0), out.stride(0),
                         HAS_RES=residual is not None, BLOCK_M=BLOCK_M, BLOCK_N=bn, BLOCK_K=BLOCK_K,
                         GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return out


def _gate_up(x2, wg, wu):
    M, K = x2.shape
    N = wg.shape[0]
    h = torch.empty((M, N), device=x2.device, dtype=x2.dtype)
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N_GATE_UP),)
    _gate_up_silu_kernel[grid](x2, wg, wu, h, M, N, K, x2.stride(0), wg.stride(0), wu.stride(0), h.stride(0),
                               BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N_GATE_UP, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                               num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return h


class RMSNorm(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))


def _bf16_linear(fan_in: int, fan_out: int) -> nn.Linear:
    return nn.Linear(fan_in, fan_out, bias=False, dtype=torch.bfloat16)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, q_heads: int, kv_heads: int, ffn: int, theta: float):
        super().__init__()
        self.q_heads, self.kv_heads, self.theta = q_heads, kv_heads, theta
        self.head_dim = hidden // q_heads
        self.attn_norm, self.mlp_norm = RMSNorm(hidden), RMSNorm(hidden)
        self.qkv = _bf16_linear(hidden, (q_heads + 2 * kv_heads) * self.head_dim)
        self.o = _bf16_linear(q_heads * self.head_dim, hidden)
        self.gate, self.up, self.down = _bf16_linear(hidden, ffn), _bf16_linear(hidden, ffn), _bf16_linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        d, hq, hkv = self.head_dim, self.q_heads, self.kv_heads
        T = batch * seq
        x2 = x.reshape(T, hidden).contiguous()

        qkv = _linear(_rms_norm(x2, self.attn_norm.weight.detach()), self.qkv.weight.detach())
        rope_heads = hq + hkv  # q heads then k heads: the first (hq + hkv) * d columns of qkv
        _rope_kernel[(triton.cdiv(T, ROPE_BLOCK_T), triton.cdiv(rope_heads, ROPE_HEADS))](
            qkv, T, seq, rope_heads, qkv.stride(0), math.log2(self.theta), HEAD_D=d,
            BLOCK_HALF=triton.next_power_of_2(max(d // 2, 1)), BLOCK_T=ROPE_BLOCK_T, HEADS=ROPE_HEADS,
            num_warps=ROPE_WARPS)

        att = torch.empty((T, hq * d), device=x.device, dtype=x.dtype)
        q, k, v = qkv[:, :hq * d], qkv[:, hq * d:(hq + hkv) * d], qkv[:, (hq + hkv) * d:]
        assert ATTN_BLOCK_M % ATTN_BLOCK_N == 0, "the unmasked key blocks must end exactly on the diagonal"
        _flash_attn_kernel[(triton.cdiv(seq, ATTN_BLOCK_M), batch * hq)](
            q, k, v, att, seq, hq, hq // hkv, qkv.stride(0), qkv.stride(0), qkv.stride(0), att.stride(0),
            (1.0 / math.sqrt(d)) * math.log2(math.e), HEAD_D=d, BLOCK_D=max(16, triton.next_power_of_2(d)),
            BLOCK_M=ATTN_BLOCK_M, BLOCK_N=ATTN_BLOCK_N, num_warps=ATTN_WARPS, num_stages=ATTN_STAGES)

        h = _linear(att, self.o.weight.detach(), residual=x2, out_dtype=torch.float32)  # residual stream in fp32
        m = _rms_norm(h, self.mlp_norm.weight.detach(), out_dtype=x.dtype)
        a = _gate_up(m, self.gate.weight.detach(), self.up.weight.detach())
        out = _linear(a, self.down.weight.detach(), residual=h, out_dtype=x.dtype)
        return out.view(batch, seq, hidden)
