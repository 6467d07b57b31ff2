"""H100 reference kernel for level3/resnet_basic_block: relu(bn2(conv2(relu(bn1(conv1(x))))) + x) in fp32,
3x3 convs with padding 1, BatchNorm on its running statistics (inference), identity shortcut.

Design. Each conv is one implicit GEMM (M = output pixels, N = C_out, K = 9 * C_in) on tensor cores
via tl.dot. A tiny fold kernel first rewrites each conv's weight as a [9 * C_in, C_out] matrix
(row tap * C_in + ci, output channels contiguous) with the BatchNorm scale gamma / sqrt(var + eps)
folded in, and writes the per-channel shift beta - mean * scale: BatchNorm then costs one add in
the conv epilogue. The conv grid is one program per (image, BLOCK_M pixel tile, BLOCK_N channel
tile), in grouped order (GROUP_M pixel tiles share a weight tile while it is hot in L2). The K loop
walks the 9 taps, and C_in in BLOCK_K slices within a tap: for a fixed tap the input pixel of
output pixel p is p + (kh - 1) * W + (kw - 1), so the A tile's addresses stay contiguous along the
pixels of one image (coalesced NCHW loads, no im2col buffer); rows whose shifted pixel falls in
the zero padding or off the image are masked to 0. The weight tile is contiguous along C_out.
Epilogue: + shift, (+ residual x for the second conv), ReLU, stored NCHW (contiguous along pixels).
DRAM traffic is close to the minimum: x read twice (conv1 input, conv2 residual), the intermediate
written and read once, output written once; weights are small and stay in L2.

Precision: the task is fp32 with a 1e-4 tolerance, which plain TF32 (10-bit mantissa) does not
meet over K = 9 * C_in, so the dots run as 3xTF32 (DOT_PRECISION 'tf32x3': split operands hi+lo,
three tensor-core products, fp32 accumulation; error near fp32's) or 'ieee' (exact fp32 FMA).
Edge cases: every load and store is masked (ragged pixels per image, C_in and C_out not multiples
of the tiles, channels smaller than the minimum 16-wide dot); offsets that scale with the batch
are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # output pixels per program (within one image)
BLOCK_N = 128  # output channels per program
BLOCK_K = 32  # input channels per K step (one tap at a time)
GROUP_M = 8  # pixel tiles that walk the channel tiles together (L2 reuse)
NUM_WARPS = 8
NUM_STAGES = 3
DOT_PRECISION = 'tf32x3'
FOLD_BLOCK = 64  # fold kernel tile (rows and columns)
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "BLOCK_K": [16, 32, 64],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "DOT_PRECISION": ['tf32x3', 'ieee'],
    "FOLD_BLOCK": [32, 64],
}


@triton.jit
def _fold_bn_weight(w_ptr, gamma_ptr, beta_ptr, mean_ptr, var_ptr, wt_ptr, shift_ptr, eps, C_IN, C_OUT,
                    BLOCK: tl.constexpr):
    """wt[tap * C_IN + ci, co] = w[co, ci, tap] * scale[co]; shift[co] = beta - mean * scale."""
    pid_k = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_k * BLOCK + tl.arange(0, BLOCK)  # tap * C_IN + ci
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)  # co
    row_ok = rows < 9 * C_IN
    col_ok = cols < C_OUT
    tap = rows // C_IN
    ci = rows % C_IN
    gamma = tl.load(gamma_ptr + cols, mask=col_ok, other=1.0).to(tl.float32)
    var = tl.load(var_ptr + cols, mask=col_ok, other=1.0).to(tl.float32)
    scale = gamma / tl.sqrt_rn(var + eps)
    src = cols[None, :] * (C_IN * 9) + ci[:, None] * 9 + tap[:, None]
    ok = row_ok[:, None] & col_ok[None, :]
    w = tl.load(w_ptr + src, mask=ok, other=0.0).to(tl.float32)
    tl.store(wt_ptr + rows[:, None] * C_OUT + cols[None, :], w * scale[None, :], mask=ok)
    if pid_k == 0:
        beta = tl.load(beta_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        tl.store(shift_ptr + cols, beta - mean * scale, mask=col_ok)


@triton.jit
def _conv3x3_bn_relu(x_ptr, wt_ptr, shift_ptr, res_ptr, out_ptr, C_IN, C_OUT, H, W, n_images,
                     HAS_RES: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr, DOT_PRECISION: tl.constexpr):
    HW = H * W
    tiles_p = tl.cdiv(HW, BLOCK_M)
    tiles_m = n_images * tiles_p
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    pid = tl.program_id(0)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    img = pid_m // tiles_p
    p = (pid_m % tiles_p) * BLOCK_M + tl.arange(0, BLOCK_M)  # output pixels of image `img`
    n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    p_ok = p < HW
    n_ok = n < C_OUT
    oh = p // W
    ow = p % W
    x_img = x_ptr + img.to(tl.int64) * C_IN * HW
    k_steps = tl.cdiv(C_IN, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for step in range(0, 9 * k_steps):
        tap = step // k_steps
        ci = (step % k_steps) * BLOCK_K + tl.arange(0, BLOCK_K)
        dh = tap // 3 - 1
        dw = tap % 3 - 1
        ih = oh + dh
        iw = ow + dw
        row_ok = p_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
        ci_ok = ci < C_IN
        a = tl.load(x_img + ci[None, :] * HW + (p + dh * W + dw)[:, None],
                    mask=row_ok[:, None] & ci_ok[None, :], other=0.0)
        b = tl.load(wt_ptr + (tap * C_IN + ci)[:, None] * C_OUT + n[None, :],
                    mask=ci_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    y = acc + tl.load(shift_ptr + n, mask=n_ok, other=0.0)[None, :]
    img_base = img.to(tl.int64) * C_OUT * HW  # int64 across images, int32 within one
    offs = n[None, :] * HW + p[:, None]
    ok = p_ok[:, None] & n_ok[None, :]
    if HAS_RES:
        y += tl.load(res_ptr + img_base + offs, mask=ok, other=0.0)
    y = tl.maximum(y, 0.0)
    tl.store(out_ptr + img_base + offs, y, mask=ok)


class ConvBN(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)  # parameters and running statistics only


def _fold(block: ConvBN) -> tuple[torch.Tensor, torch.Tensor]:
    w = block.conv.weight.contiguous()
    c_out, c_in = w.shape[0], w.shape[1]
    wt = torch.empty((9 * c_in, c_out), device=w.device, dtype=torch.float32)
    shift = torch.empty((c_out,), device=w.device, dtype=torch.float32)
    bn = block.bn
    grid = (triton.cdiv(9 * c_in, FOLD_BLOCK), triton.cdiv(c_out, FOLD_BLOCK))
    _fold_bn_weight[grid](w, bn.weight.contiguous(), bn.bias.contiguous(), bn.running_mean.contiguous(),
                          bn.running_var.contiguous(), wt, shift, float(bn.eps), c_in, c_out,
                          BLOCK=FOLD_BLOCK, num_warps=4)
    return wt, shift


def _conv(x: torch.Tensor, wt: torch.Tensor, shift: torch.Tensor, res: torch.Tensor | None) -> torch.Tensor:
    n_images, c_in, h, w = x.shape
    c_out = wt.shape[1]
    out = torch.empty((n_images, c_out, h, w), device=x.device, dtype=torch.float32)
    tiles = n_images * triton.cdiv(h * w, BLOCK_M) * triton.cdiv(c_out, BLOCK_N)
    _conv3x3_bn_relu[(tiles,)](x, wt, shift, res if res is not None else x, out, c_in, c_out, h, w, n_images,
                               HAS_RES=res is not None, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                               GROUP_M=GROUP_M, DOT_PRECISION=DOT_PRECISION, num_warps=NUM_WARPS,
                               num_stages=NUM_STAGES)
    return out


class ModelNew(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.first, self.second = ConvBN(channels), ConvBN(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w1, s1 = _fold(self.first)
        w2, s2 = _fold(self.second)
        h = _conv(x, w1, s1, None)
        return _conv(h, w2, s2, x)
