"""H100 reference kernel for level3/mobilenet_inverted_residual: MobileNetV2's inverted residual in fp32,
x + bn3(project(relu6(bn2(depthwise3x3(relu6(bn1(expand(x)))))))), BatchNorm on running statistics.

Design. Three tiny fold launches rewrite each conv weight as a K-major matrix with its BatchNorm
scale gamma / sqrt(var + eps) folded in ([C, wide] for expand, [9, wide] for the depthwise taps,
[wide, C] for project) and write each per-channel shift beta - mean * scale; every BatchNorm then
costs one add. Two launches do the work:
1. expand: an implicit GEMM (M = pixels of one image, N = wide, K = C) on tensor cores, one program
   per (image, BLOCK_M pixel tile, BLOCK_N channel tile) in grouped order; epilogue + shift1,
   ReLU6; the expanded activation h is written once (NCHW, fp32).
2. depthwise + project: one program per (image, BLOCK_M pixel tile, C tile, usually all of C).
   The K loop walks the wide channels in BLOCK_K slices; each slice's A tile is produced on the
   fly by the depthwise conv (9 tap-shifted loads of h, contiguous along pixels, masked at the
   image borders, FMA with the folded tap weights) + shift2, ReLU6, and fed to tl.dot with the
   folded project weights. The depthwise output (as wide as h) never touches DRAM. Epilogue:
   + shift3 + x (the identity shortcut), stored NCHW.
DRAM traffic: x read twice, h written and read once (its 9 shifted reads hit L1/L2), output
written once; the smallest possible without recomputing the expand conv over a halo.

Precision: fp32 with a 1e-4 tolerance, which TF32 does not meet, so dots run as 3xTF32
(DOT_PRECISION 'tf32x3', error near fp32's) or 'ieee'; the depthwise taps are plain fp32 FMAs.
Edge cases: every load and store is masked (ragged pixels per image, channel counts that are not
multiples of the tiles or below the 16-wide minimum of a dot); offsets across images are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_M = 128  # output pixels per program (within one image), both launches
EXPAND_BLOCK_N = 128  # expanded channels per expand program
EXPAND_BLOCK_K = 32  # input channels per expand K step
PROJECT_BLOCK_N = 64  # largest C tile of the depthwise + project launch (one tile when C fits)
PROJECT_BLOCK_K = 16  # expanded channels per depthwise + project K step
GROUP_M = 8  # pixel tiles that walk the channel tiles together (L2 reuse)
NUM_WARPS = 8
NUM_STAGES = 3  # expand launch
DW_NUM_STAGES = 3  # depthwise + project launch (capped to fit shared memory, see _dw_stages)
DOT_PRECISION = 'tf32x3'
FOLD_BLOCK = 64  # fold kernel tile (rows and columns)
TUNABLES = {
    "BLOCK_M": [64, 128],
    "EXPAND_BLOCK_N": [64, 128],
    "EXPAND_BLOCK_K": [16, 32],
    "PROJECT_BLOCK_N": [32, 64, 128],
    "PROJECT_BLOCK_K": [16, 32],
    "GROUP_M": [4, 8, 16],
    "NUM_WARPS": [4, 8],
    "NUM_STAGES": [2, 3, 4],
    "DW_NUM_STAGES": [1, 2, 3, 4],
    "DOT_PRECISION": ['tf32x3', 'ieee'],
    "FOLD_BLOCK": [32, 64],
}


@triton.jit
def _fold_bn_weight(w_ptr, gamma_ptr, beta_ptr, mean_ptr, var_ptr, wt_ptr, shift_ptr, eps, C_IN, C_OUT,
                    TAPS: tl.constexpr, BLOCK: tl.constexpr):
    """wt[tap * C_IN + ci, co] = w[co, ci, tap] * scale[co]; shift[co] = beta - mean * scale."""
    pid_k = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_k * BLOCK + tl.arange(0, BLOCK)  # tap * C_IN + ci
    cols = pid_n * BLOCK + tl.arange(0, BLOCK)  # co
    row_ok = rows < TAPS * C_IN
    col_ok = cols < C_OUT
    tap = rows // C_IN
    ci = rows % C_IN
    gamma = tl.load(gamma_ptr + cols, mask=col_ok, other=1.0).to(tl.float32)
    var = tl.load(var_ptr + cols, mask=col_ok, other=1.0).to(tl.float32)
    scale = gamma / tl.sqrt_rn(var + eps)
    src = cols[None, :] * (C_IN * TAPS) + ci[:, None] * TAPS + tap[:, None]
    ok = row_ok[:, None] & col_ok[None, :]
    w = tl.load(w_ptr + src, mask=ok, other=0.0).to(tl.float32)
    tl.store(wt_ptr + rows[:, None] * C_OUT + cols[None, :], w * scale[None, :], mask=ok)
    if pid_k == 0:
        beta = tl.load(beta_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        tl.store(shift_ptr + cols, beta - mean * scale, mask=col_ok)


@triton.jit
def _tile_ids(HW, n_images, C_OUT, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(image, pixel tile start, channel tile start) of this program, pixel tiles grouped by GROUP_M."""
    tiles_p = tl.cdiv(HW, BLOCK_M)
    tiles_m = n_images * tiles_p
    tiles_n = tl.cdiv(C_OUT, BLOCK_N)
    pid = tl.program_id(0)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    group_rows = tl.minimum(tiles_m - first_m, GROUP_M)
    pid_m = first_m + (pid % per_group) % group_rows
    pid_n = (pid % per_group) // group_rows
    return pid_m // tiles_p, (pid_m % tiles_p) * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _expand_bn_relu6(x_ptr, we_ptr, shift_ptr, h_ptr, C, WIDE, HW, n_images,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                     DOT_PRECISION: tl.constexpr):
    img, p0, n0 = _tile_ids(HW, n_images, WIDE, BLOCK_M, BLOCK_N, GROUP_M)
    p = p0 + tl.arange(0, BLOCK_M)
    n = n0 + tl.arange(0, BLOCK_N)
    p_ok = p < HW
    n_ok = n < WIDE
    x_img = x_ptr + img.to(tl.int64) * C * HW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, C, BLOCK_K):
        ci = k0 + tl.arange(0, BLOCK_K)
        ci_ok = ci < C
        a = tl.load(x_img + ci[None, :] * HW + p[:, None], mask=p_ok[:, None] & ci_ok[None, :], other=0.0)
        b = tl.load(we_ptr + ci[:, None] * WIDE + n[None, :], mask=ci_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    y = acc + tl.load(shift_ptr + n, mask=n_ok, other=0.0)[None, :]
    y = tl.minimum(tl.maximum(y, 0.0), 6.0)
    h_img = h_ptr + img.to(tl.int64) * WIDE * HW
    tl.store(h_img + n[None, :] * HW + p[:, None], y, mask=p_ok[:, None] & n_ok[None, :])


@triton.jit
def _depthwise_project(h_ptr, wd_ptr, shift2_ptr, wp_ptr, shift3_ptr, x_ptr, out_ptr, C, WIDE, H, W, n_images,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                       DOT_PRECISION: tl.constexpr):
    HW = H * W
    img, p0, n0 = _tile_ids(HW, n_images, C, BLOCK_M, BLOCK_N, GROUP_M)
    p = p0 + tl.arange(0, BLOCK_M)
    n = n0 + tl.arange(0, BLOCK_N)
    p_ok = p < HW
    n_ok = n < C
    oh = p // W
    ow = p % W
    h_img = h_ptr + img.to(tl.int64) * WIDE * HW
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, WIDE, BLOCK_K):
        c = k0 + tl.arange(0, BLOCK_K)
        c_ok = c < WIDE
        d = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
        for tap in tl.static_range(9):
            dh = tap // 3 - 1
            dw = tap % 3 - 1
            ih = oh + dh
            iw = ow + dw
            row_ok = p_ok & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
            v = tl.load(h_img + c[None, :] * HW + (p + dh * W + dw)[:, None],
                        mask=row_ok[:, None] & c_ok[None, :], other=0.0)
            k = tl.load(wd_ptr + tap * WIDE + c, mask=c_ok, other=0.0)
            d += v * k[None, :]
        a = d + tl.load(shift2_ptr + c, mask=c_ok, other=0.0)[None, :]
        a = tl.minimum(tl.maximum(a, 0.0), 6.0)
        b = tl.load(wp_ptr + c[:, None] * C + n[None, :], mask=c_ok[:, None] & n_ok[None, :], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=DOT_PRECISION)
    y = acc + tl.load(shift3_ptr + n, mask=n_ok, other=0.0)[None, :]
    img_base = img.to(tl.int64) * C * HW  # int64 across images, int32 within one
    offs = n[None, :] * HW + p[:, None]
    ok = p_ok[:, None] & n_ok[None, :]
    y += tl.load(x_ptr + img_base + offs, mask=ok, other=0.0)
    tl.store(out_ptr + img_base + offs, y, mask=ok)


def _dw_stages(block_n: int) -> int:
    """DW_NUM_STAGES, less where the pipelined buffers would overflow H100's 227 KiB of shared memory:
    each extra stage buffers the 9 tap tiles of h and one project-weight tile (40 KiB kept for the rest)."""
    per_stage = 4 * (9 * BLOCK_M * PROJECT_BLOCK_K + PROJECT_BLOCK_K * block_n)
    stages = DW_NUM_STAGES
    while stages > 1 and (stages - 1) * per_stage + 40960 > 232448:
        stages -= 1
    return stages


def _fold(conv: nn.Conv2d, bn: nn.BatchNorm2d, c_in: int, taps: int) -> tuple[torch.Tensor, torch.Tensor]:
    w = conv.weight.contiguous()
    c_out = w.shape[0]
    wt = torch.empty((taps * c_in, c_out), device=w.device, dtype=torch.float32)
    shift = torch.empty((c_out,), device=w.device, dtype=torch.float32)
    grid = (triton.cdiv(taps * c_in, FOLD_BLOCK), triton.cdiv(c_out, FOLD_BLOCK))
    _fold_bn_weight[grid](w, bn.weight.contiguous(), bn.bias.contiguous(), bn.running_mean.contiguous(),
                          bn.running_var.contiguous(), wt, shift, float(bn.eps), c_in, c_out,
                          TAPS=taps, BLOCK=FOLD_BLOCK, num_warps=4)
    return wt, shift


class ModelNew(nn.Module):
    def __init__(self, channels: int, expand: int):
        super().__init__()
        wide = channels * expand
        self.expand = nn.Conv2d(channels, wide, 1, bias=False)
        self.depthwise = nn.Conv2d(wide, wide, 3, padding=1, groups=wide, bias=False)
        self.project = nn.Conv2d(wide, channels, 1, bias=False)
        # parameters and running statistics only: the kernels apply them
        self.bn1, self.bn2, self.bn3 = nn.BatchNorm2d(wide), nn.BatchNorm2d(wide), nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_images, c, h, w = x.shape
        wide = self.expand.weight.shape[0]
        hw = h * w
        we, s1 = _fold(self.expand, self.bn1, c, 1)
        wd, s2 = _fold(self.depthwise, self.bn2, 1, 9)
        wp, s3 = _fold(self.project, self.bn3, wide, 1)
        hid = torch.empty((n_images, wide, h, w), device=x.device, dtype=torch.float32)
        tiles_m = n_images * triton.cdiv(hw, BLOCK_M)
        _expand_bn_relu6[(tiles_m * triton.cdiv(wide, EXPAND_BLOCK_N),)](
            x, we, s1, hid, c, wide, hw, n_images, BLOCK_M=BLOCK_M, BLOCK_N=EXPAND_BLOCK_N,
            BLOCK_K=EXPAND_BLOCK_K, GROUP_M=GROUP_M, DOT_PRECISION=DOT_PRECISION, num_warps=NUM_WARPS,
            num_stages=NUM_STAGES)
        # one C tile when C fits in PROJECT_BLOCK_N (the depthwise is then computed once per pixel)
        block_n = max(16, min(PROJECT_BLOCK_N, triton.next_power_of_2(c)))
        out = torch.empty_like(x)
        _depthwise_project[(tiles_m * triton.cdiv(c, block_n),)](
            hid, wd, s2, wp, s3, x, out, c, wide, h, w, n_images, BLOCK_M=BLOCK_M, BLOCK_N=block_n,
            BLOCK_K=PROJECT_BLOCK_K, GROUP_M=GROUP_M, DOT_PRECISION=DOT_PRECISION, num_warps=NUM_WARPS,
            num_stages=_dw_stages(block_n))
        return out
