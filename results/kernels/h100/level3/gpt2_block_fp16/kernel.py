"""H100 reference kernel for level3/gpt2_block_fp16: a pre-LN GPT-2 block in fp16 as seven Triton launches:
LayerNorm, QKV GEMM (+bias), causal flash attention, out-projection GEMM (+bias +residual), LayerNorm,
fc GEMM (+bias, GELU-tanh), fc_out GEMM (+bias +residual).

GEMMs: one BLOCK_M x BLOCK_N output tile per program, BLOCK_K 64, NUM_STAGES-deep software pipelining,
fp16 operands on the tensor cores (wgmma on sm_90a) with fp32 accumulators, and programs ordered in
groups of GROUP_M row tiles so that weight tiles are reused from L2. Every bias, activation and residual
is applied in the GEMM's epilogue on the fp32 accumulator and rounded to fp16 once, so no elementwise
pass touches DRAM: the only intermediates are the normalised rows, qkv, the attention output, the
first residual sum and the 4x-wide GELU activations, each written once and read once.
LayerNorm: one program per row, the whole row in registers (mean and variance in fp32, two passes
over registers, one read and one write of DRAM).
Attention: flash-attention style, one program per (BLOCK_M queries, batch*head); q, k and v are read in
place from the QKV GEMM's output (no transposes), scores and the online softmax stay in fp32 in
registers (exp2 with the scale folded in), P is cast to fp16 for the P @ V tensor-core product, and the
output is written straight into the [tokens, hidden] layout the projection GEMM reads. Key blocks below
the diagonal run without masks; only the diagonal blocks are masked. Query blocks are launched longest
first to balance the causal triangle.
Edge cases: rows/columns past the matrix are clamped on load and masked on store, K tails and head
dims that are not a power of two are masked, offsets are int64.
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128
BLOCK_N = 256  # qkv and fc GEMMs
BLOCK_N_RES = 128  # GEMMs with a residual epilogue (more registers live at the end)
BLOCK_K = 64
GROUP_M = 8
NUM_WARPS = 8
NUM_STAGES = 3
ATTN_BLOCK_M = 128
ATTN_BLOCK_N = 64
ATTN_WARPS = 8
ATTN_STAGES = 3
LN_WARPS = 8
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_N_RES": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "ATTN_BLOCK_M": [64, 128],
    "ATTN_BLOCK_N": [32, 64],  # must divide ATTN_BLOCK_M
    "ATTN_WARPS": [4, 8],
    "ATTN_STAGES": [2, 3, 4],
    "LN_WARPS": [4, 8, 16],
}


@triton.jit
def _layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, H, stride_x, stride_o, eps, BLOCK_H: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    x = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / H
    diff = tl.where(ok, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, axis=0) / H + eps)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_o + cols, (diff * rstd * w + b).to(out_ptr.dtype.element_ty), mask=ok)


@triton.jit
def _linear_kernel(a_ptr, w_ptr, bias_ptr, res_ptr, c_ptr, M, N, K, stride_am, stride_wn, stride_rm, stride_cm,
                   GELU: tl.constexpr, HAS_RES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    """C = epilogue(A @ W^T + bias): GELU-tanh or + residual, on the fp32 accumulator."""
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(N, BLOCK_N)
    width = GROUP_M * num_n
    first_m = (pid // width) * GROUP_M
    size_m = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % width) % size_m
    pid_n = (pid % width) // size_m
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
    n_ok = rn < N
    ok = (rm[:, None] < M) & n_ok[None, :]
    acc += tl.load(bias_ptr + rn, mask=n_ok, other=0.0).to(tl.float32)[None, :]
    if GELU:
        u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
        acc = acc / (1.0 + tl.exp(-2.0 * u))  # 0.5 * x * (1 + tanh(u)) = x * sigmoid(2u), overflow-safe
    if HAS_RES:
        res = tl.load(res_ptr + rm.to(tl.int64)[:, None] * stride_rm + rn[None, :], mask=ok, other=0.0)
        acc += res.to(tl.float32)
    tl.store(c_ptr + rm.to(tl.int64)[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=ok)


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


def _layer_norm(x2, norm):
    M, H = x2.shape
    out = torch.empty_like(x2)
    _layer_norm_kernel[(M,)](x2, norm.weight.detach(), norm.bias.detach(), out, H, x2.stride(0), out.stride(0),
                             norm.eps, BLOCK_H=triton.next_power_of_2(H), num_warps=LN_WARPS)
    return out


def _linear(a, layer, gelu=False, residual=None):
    M, K = a.shape
    w = layer.weight.detach()
    N = w.shape[0]
    out = torch.empty((M, N), device=a.device, dtype=a.dtype)
    res = residual if residual is not None else out
    bn = BLOCK_N if residual is None else BLOCK_N_RES
    grid = (triton.cdiv(M, BLOCK_M) * triton.cdiv(N, bn),)
    _linear_kernel[grid](a, w, layer.bias.detach(), res, out, M, N, K, a.stride(0), w.stride(0), res.stride(0),
                         out.stride(0), GELU=gelu, HAS_RES=residual is not None, BLOCK_M=BLOCK_M, BLOCK_N=bn,
                         BLOCK_K=BLOCK_K, GROUP_M=GROUP_M, num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return out


def _causal_attention(qkv, batch, seq, heads, d):
    hidden = heads * d
    out = torch.empty((batch * seq, hidden), device=qkv.device, dtype=qkv.dtype)
    q, k, v = qkv[:, :hidden], qkv[:, hidden:2 * hidden], qkv[:, 2 * hidden:]
    assert ATTN_BLOCK_M % ATTN_BLOCK_N == 0, "the unmasked key blocks must end exactly on the diagonal"
    grid = (triton.cdiv(seq, ATTN_BLOCK_M), batch * heads)
    _flash_attn_kernel[grid](q, k, v, out, seq, heads, 1, qkv.stride(0), qkv.stride(0), qkv.stride(0), out.stride(0),
                             (1.0 / math.sqrt(d)) * math.log2(math.e), HEAD_D=d,
                             BLOCK_D=max(16, triton.next_power_of_2(d)), BLOCK_M=ATTN_BLOCK_M, BLOCK_N=ATTN_BLOCK_N,
                             num_warps=ATTN_WARPS, num_stages=ATTN_STAGES)
    return out


def _fp16_linear(fan_in: int, fan_out: int) -> nn.Linear:
    return nn.Linear(fan_in, fan_out, dtype=torch.float16)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(hidden, dtype=torch.float16)
        self.ln2 = nn.LayerNorm(hidden, dtype=torch.float16)
        self.qkv, self.proj = _fp16_linear(hidden, 3 * hidden), _fp16_linear(hidden, hidden)
        self.fc, self.fc_out = _fp16_linear(hidden, 4 * hidden), _fp16_linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        d = hidden // self.heads
        x2 = x.reshape(batch * seq, hidden).contiguous()
        qkv = _linear(_layer_norm(x2, self.ln1), self.qkv)
        att = _causal_attention(qkv, batch, seq, self.heads, d)
        x1 = _linear(att, self.proj, residual=x2)
        hid = _linear(_layer_norm(x1, self.ln2), self.fc, gelu=True)
        out = _linear(hid, self.fc_out, residual=x1)
        return out.view(batch, seq, hidden)
