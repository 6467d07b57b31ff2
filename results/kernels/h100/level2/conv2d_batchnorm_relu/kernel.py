"""H100 reference kernel for level2/conv2d_batchnorm_relu: relu(batch_norm(conv2d(x, w, padding=1))), 3x3,
stride 1, NCHW fp32, BatchNorm on its running statistics (the task calls F.batch_norm with training=False,
so the evaluator's training mode does not change it). The BatchNorm and the ReLU are folded into the GEMM.

Implicit GEMM: M = N*H*W output pixels, N = C_out, K = 9*C_in. A prep kernel folds BatchNorm into a
per-channel scale gamma / sqrt(var + eps) and shift beta - mean * scale; a second one repacks the weight
[C_out, C_in, 3, 3], multiplied by the scale, into [9, C_out, C_in] (tap-major, C_in contiguous), split into a
tf32 head and its fp32 tail (two 0.6 MB arrays at the default shape), so that each K step is one 3x3 tap and a
BLOCK_K slice of input channels: the two B tiles are dense, coalesced loads and the A tile is x[n, ci,
oh+kh-1, ow+kw-1], gathered straight from NCHW (coalesced along the pixel axis) with one row mask per tap for
the zero padding; no im2col buffer is ever written. The K loop is one flat loop over (tap, channel slice) so
Triton software-pipelines it with cp.async (NUM_STAGES). The 1e-4 tolerance rules out plain TF32 (about 1e-3
error here), so each step runs 3xTF32 on Hopper's tensor cores: the A tile is split into head and tail in
registers, and tail*head, head*tail and head*head wgmma products go into the one fp32 accumulator (about fp32
accuracy at several times the CUDA-core fp32 rate; Triton's own input_precision='tf32x3' keeps a second
128x128 accumulator and spilled registers; DOT_PRECISION='ieee' is the exact CUDA-core fallback in TUNABLES).
Programs are ordered in GROUP_M swizzled groups so the weight tiles and the input rows stay in L2. The
epilogue adds the shift and applies a NaN-preserving ReLU in registers and stores straight into NCHW
(coalesced along pixels), so the pre-activation never goes to memory. DRAM traffic is about one read of x (the
3x3 halo and the other C_out tiles re-read it from L2) and one write of y. Tiles shrink for small C_in /
C_out; every load and store is masked, so ragged pixel counts, channel counts that are not multiples of
anything, and the image borders are all handled. The default 128x128x16 tile with 8 warps and 4 stages
compiles for sm_90a to wgmma with cp.async, 88 KB of shared memory and about 180 registers without spills on
every shape variant.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # output pixels per tile
BLOCK_N = 128  # output channels per tile
BLOCK_K = 16  # input channels per K step (one tap at a time)
GROUP_M = 8  # M tiles per swizzle group
NUM_WARPS = 8
NUM_STAGES = 4
DOT_PRECISION = "tf32x3"
PREP_BLOCK = 1024  # weight repack elements per program
BN_EPS = 1e-5
TUNABLES = {
    "BLOCK_M": [64, 128, 256],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "DOT_PRECISION": ["tf32x3", "ieee"],
    "PREP_BLOCK": [512, 1024, 2048],
}


@triton.jit
def _tf32_round(v):
    # v rounded to tf32 (10 mantissa bits, to nearest, ties away from zero), as cvt.rna.tf32.f32
    bits = v.to(tl.uint32, bitcast=True)
    return ((bits + 0x1000) & 0xFFFFE000).to(tl.float32, bitcast=True)


@triton.jit
def _pack_weight_kernel(w_ptr, ss_ptr, wp_ptr, C_OUT, C_IN, TOTAL, SPLIT: tl.constexpr, BLOCK: tl.constexpr):
    # with v = w[co, ci, tap] * scale[co]: wp[0, tap, co, ci] = head of v, wp[1, tap, co, ci] = its tail
    # (SPLIT), else v and 0
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < TOTAL
    per_tap = C_OUT * C_IN
    tap = offs // per_tap
    rem = offs - tap * per_tap
    src = rem * 9 + tap  # (co * C_IN + ci) * 9 + tap
    w = tl.load(w_ptr + src, mask=ok, other=0.0).to(tl.float32) * tl.load(ss_ptr + rem // C_IN, mask=ok, other=0.0)
    head = _tf32_round(w) if SPLIT else w
    tl.store(wp_ptr + offs, head, mask=ok)
    tl.store(wp_ptr + TOTAL + offs, w - head, mask=ok)


@triton.jit
def _bn_fold_kernel(g_ptr, beta_ptr, mean_ptr, var_ptr, ss_ptr, C_OUT, eps, BLOCK: tl.constexpr):
    # ss[0, co] = gamma / sqrt(var + eps), ss[1, co] = beta - mean * ss[0, co]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < C_OUT
    gamma = tl.load(g_ptr + offs, mask=ok, other=1.0).to(tl.float32)
    beta = tl.load(beta_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    mean = tl.load(mean_ptr + offs, mask=ok, other=0.0).to(tl.float32)
    var = tl.load(var_ptr + offs, mask=ok, other=1.0).to(tl.float32)
    scale = gamma / tl.sqrt_rn(var + eps)
    tl.store(ss_ptr + offs, scale, mask=ok)
    tl.store(ss_ptr + C_OUT + offs, beta - mean * scale, mask=ok)


@triton.jit
def _conv3x3_bn_relu_kernel(x_ptr, wp_ptr, ss_ptr, y_ptr, C_IN, H, W, C_OUT, M,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr, SPLIT: tl.constexpr):
    pid = tl.program_id(0)
    num_m = tl.cdiv(M, BLOCK_M)
    num_n = tl.cdiv(C_OUT, BLOCK_N)
    per_group = GROUP_M * num_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(num_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows

    HW = H * W
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = offs_m < M
    img = offs_m // HW
    pix = offs_m - img * HW
    oh = pix // W
    ow = pix - oh * W
    a_base = x_ptr + (img.to(tl.int64) * C_IN * HW + pix)
    w_total = 9 * C_OUT * C_IN
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    n_ok = offs_n < C_OUT
    offs_k = tl.arange(0, BLOCK_K)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    n_ci = tl.cdiv(C_IN, BLOCK_K)
    for it in range(0, 9 * n_ci):
        tap = it // n_ci
        ci = (it - tap * n_ci) * BLOCK_K + offs_k
        kh = tap // 3
        ih = oh + (kh - 1)
        iw = ow + (tap - kh * 3 - 1)
        row_ok = m_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        ci_ok = ci < C_IN
        a_ptrs = a_base[:, None] + ((kh - 1) * W + (tap - kh * 3 - 1) + ci * HW)[None, :]
        a = tl.load(a_ptrs, mask=row_ok[:, None] & ci_ok[None, :], other=0.0)
        b_ptrs = wp_ptr + tap * (C_OUT * C_IN) + offs_n[None, :] * C_IN + ci[:, None]
        b_mask = ci_ok[:, None] & n_ok[None, :]
        b_head = tl.load(b_ptrs, mask=b_mask, other=0.0)
        if SPLIT:
            # 3xTF32 into the one accumulator: tail products first, then head x head
            b_tail = tl.load(b_ptrs + w_total, mask=b_mask, other=0.0)
            a_head = _tf32_round(a)
            acc = tl.dot(a - a_head, b_head, acc, input_precision="tf32")
            acc = tl.dot(a_head, b_tail, acc, input_precision="tf32")
            acc = tl.dot(a_head, b_head, acc, input_precision="tf32")
        else:
            acc = tl.dot(a, b_head, acc, input_precision="ieee")

    shift = tl.load(ss_ptr + C_OUT + offs_n, mask=n_ok, other=0.0)
    acc = acc + shift[None, :]
    acc = tl.where(acc < 0.0, 0.0, acc)
    y_ptrs = y_ptr + (img.to(tl.int64) * C_OUT * HW + pix)[:, None] + (offs_n * HW)[None, :]
    tl.store(y_ptrs, acc, mask=m_ok[:, None] & n_ok[None, :])


def _tile(limit: int, size: int) -> int:
    return max(16, min(limit, triton.next_power_of_2(size)))


def conv3x3_bn_relu(x: torch.Tensor, weight: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor,
                    mean: torch.Tensor, var: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.contiguous()
    weight = weight.contiguous()
    n, c_in, h, w = x.shape
    c_out = weight.shape[0]
    ss = torch.empty((2, c_out), device=x.device, dtype=torch.float32)
    _bn_fold_kernel[(triton.cdiv(c_out, PREP_BLOCK),)](gamma.contiguous(), beta.contiguous(), mean.contiguous(),
                                                       var.contiguous(), ss, c_out, eps, BLOCK=PREP_BLOCK)
    split = DOT_PRECISION == "tf32x3"
    packed = torch.empty((2, 9, c_out, c_in), device=x.device, dtype=torch.float32)
    total = packed.numel() // 2
    _pack_weight_kernel[(triton.cdiv(total, PREP_BLOCK),)](weight, ss, packed, c_out, c_in, total, SPLIT=split,
                                                           BLOCK=PREP_BLOCK)
    y = torch.empty((n, c_out, h, w), device=x.device, dtype=x.dtype)
    m = n * h * w
    bm, bn, bk = BLOCK_M, _tile(BLOCK_N, c_out), _tile(BLOCK_K, c_in)
    grid = (triton.cdiv(m, bm) * triton.cdiv(c_out, bn),)
    _conv3x3_bn_relu_kernel[grid](x, packed, ss, y, c_in, h, w, c_out, m,
                                  BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=GROUP_M, SPLIT=split,
                                  num_warps=NUM_WARPS, num_stages=NUM_STAGES)
    return y


class ModelNew(nn.Module):
    def __init__(self, in_ch: int, out_ch: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(out_ch, in_ch, 3, 3) * (9 * in_ch) ** -0.5)
        self.bn_weight = nn.Parameter(1.0 + 0.2 * torch.randn(out_ch))
        self.bn_bias = nn.Parameter(0.2 * torch.randn(out_ch))
        self.register_buffer("running_mean", 0.2 * torch.randn(out_ch))
        self.register_buffer("running_var", 0.5 + torch.rand(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return conv3x3_bn_relu(x, self.weight, self.bn_weight, self.bn_bias, self.running_mean, self.running_var,
                               BN_EPS)
