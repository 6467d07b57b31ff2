"""H100 reference kernel for level2/group_norm_silu: GroupNorm (affine, eps 1e-6) then SiLU on an NCHW
fp32 activation, as in diffusion UNet/VAE resblocks; the SiLU is applied in the normalising sweep, so the
normalised tensor never goes to memory.

A group (C/G channels x H*W pixels of one sample) is contiguous in NCHW. Two paths, chosen in Python from
the group size:
- Groups of at most FUSED_MAX elements: one program per (sample, group). Sweep 1 streams the group once
  and accumulates per-lane sums of d = x - shift and d*d (shift = the group's first element, which removes
  the cancellation of E[x^2] - E[x]^2 for offset data such as this task's 2x+0.3 input; each lane sums
  only size/BLOCK values, so fp32 holds the 1e-4 tolerance); sweep 2 re-reads the group, which the same
  program has just read (at most FUSED_MAX * 4 bytes per program, so the re-read is an L2 hit), and writes
  silu((x - mean) * rstd * w[c] + b[c]) channel by channel with the per-channel scale as a scalar. DRAM
  traffic is about the minimum: one read and one write of the activation.
- Larger groups (the VAE shape: 128 groups of 1M elements, too few programs and too large for L2): a
  stats kernel over (sample, group, channel, CHUNK of pixels) writes shifted partial sums to a small
  workspace, and an apply kernel over the same chunks combines its group's partials, normalises its chunk
  and applies the SiLU; it visits the chunks in reverse so the ones the stats kernel read last are still
  in L2 when they are read again.
SiLU is computed in fp32 as z / (1 + exp(-z)). Ragged pixel counts, channel counts and group sizes are
handled by masks; offsets are int64.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 2048  # elements per vector step
FUSED_MAX = 65536  # largest group (elements) handled by one program
CHUNK = 8192  # pixels per program on the split path
BLOCK_S = 128  # partials combined per step on the split path
NUM_WARPS = 8
TUNABLES = {
    "BLOCK": [1024, 2048, 4096],
    "FUSED_MAX": [16384, 32768, 65536, 131072],
    "CHUNK": [4096, 8192, 16384],
    "BLOCK_S": [64, 128, 256],
    "NUM_WARPS": [4, 8],
}
EPS = 1e-6


@triton.jit
def _gn_fused_kernel(x_ptr, w_ptr, b_ptr, y_ptr, C, HW, CPG, G, eps,
                     SILU: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)  # sample * G + group
    g = pid % G
    size = CPG * HW
    base = pid.to(tl.int64) * size
    offs = tl.arange(0, BLOCK)
    shift = tl.load(x_ptr + base).to(tl.float32)
    s1 = tl.zeros((BLOCK,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, size, BLOCK):
        idx = start + offs
        m = idx < size
        d = tl.where(m, tl.load(x_ptr + base + idx, mask=m, other=0.0).to(tl.float32) - shift, 0.0)
        s1 += d
        s2 += d * d
    n = size.to(tl.float32)
    dm = tl.sum(s1, axis=0) / n
    var = tl.maximum(tl.sum(s2, axis=0) / n - dm * dm, 0.0)
    mean = shift + dm
    rstd = 1.0 / tl.sqrt_rn(var + eps)
    for c in range(0, CPG):
        ch = g * CPG + c
        scale = rstd * tl.load(w_ptr + ch).to(tl.float32)
        bias = tl.load(b_ptr + ch).to(tl.float32)
        cbase = base + c * HW
        for start in range(0, HW, BLOCK):
            idx = start + offs
            m = idx < HW
            v = tl.load(x_ptr + cbase + idx, mask=m, other=0.0).to(tl.float32)
            out = (v - mean) * scale + bias
            if SILU:
                out = out / (1.0 + tl.exp(-out))
            tl.store(y_ptr + cbase + idx, out, mask=m)


@triton.jit
def _gn_partial_kernel(x_ptr, part_ptr, HW, CPG, N_HWC,
                       CHUNK: tl.constexpr, BLOCK: tl.constexpr):
    pid_g = tl.program_id(0)  # sample * G + group
    s = tl.program_id(1)  # channel-in-group * N_HWC + pixel chunk
    c = s // N_HWC
    p0 = (s - c * N_HWC) * CHUNK
    gbase = pid_g.to(tl.int64) * CPG * HW
    shift = tl.load(x_ptr + gbase).to(tl.float32)
    cbase = gbase + c * HW
    offs = tl.arange(0, BLOCK)
    s1 = tl.zeros((BLOCK,), dtype=tl.float32)
    s2 = tl.zeros((BLOCK,), dtype=tl.float32)
    for start in range(0, CHUNK, BLOCK):
        idx = p0 + start + offs
        m = idx < HW
        d = tl.where(m, tl.load(x_ptr + cbase + idx, mask=m, other=0.0).to(tl.float32) - shift, 0.0)
        s1 += d
        s2 += d * d
    n_parts = CPG * N_HWC
    out = part_ptr + (pid_g.to(tl.int64) * n_parts + s) * 2
    tl.store(out, tl.sum(s1, axis=0))
    tl.store(out + 1, tl.sum(s2, axis=0))


@triton.jit
def _gn_apply_kernel(x_ptr, part_ptr, w_ptr, b_ptr, y_ptr, HW, CPG, G, N_HWC, NG, eps,
                     SILU: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr, BLOCK_S: tl.constexpr):
    n_parts = CPG * N_HWC
    flat = NG * n_parts - 1 - (tl.program_id(0) * n_parts + tl.program_id(1))  # reverse of the stats order
    pid_g = flat // n_parts
    s = flat - pid_g * n_parts
    g = pid_g % G
    gbase = pid_g.to(tl.int64) * CPG * HW
    shift = tl.load(x_ptr + gbase).to(tl.float32)
    soffs = tl.arange(0, BLOCK_S)
    t1 = tl.zeros((BLOCK_S,), dtype=tl.float32)
    t2 = tl.zeros((BLOCK_S,), dtype=tl.float32)
    pbase = part_ptr + pid_g.to(tl.int64) * n_parts * 2
    for j0 in range(0, n_parts, BLOCK_S):
        j = j0 + soffs
        m = j < n_parts
        t1 += tl.load(pbase + j * 2, mask=m, other=0.0)
        t2 += tl.load(pbase + j * 2 + 1, mask=m, other=0.0)
    n = (CPG * HW).to(tl.float32)
    dm = tl.sum(t1, axis=0) / n
    var = tl.maximum(tl.sum(t2, axis=0) / n - dm * dm, 0.0)
    mean = shift + dm
    rstd = 1.0 / tl.sqrt_rn(var + eps)
    c = s // N_HWC
    p0 = (s - c * N_HWC) * CHUNK
    ch = g * CPG + c
    scale = rstd * tl.load(w_ptr + ch).to(tl.float32)
    bias = tl.load(b_ptr + ch).to(tl.float32)
    cbase = gbase + c * HW
    offs = tl.arange(0, BLOCK)
    for start in range(0, CHUNK, BLOCK):
        idx = p0 + start + offs
        m = idx < HW
        v = tl.load(x_ptr + cbase + idx, mask=m, other=0.0).to(tl.float32)
        out = (v - mean) * scale + bias
        if SILU:
            out = out / (1.0 + tl.exp(-out))
        tl.store(y_ptr + cbase + idx, out, mask=m)


def group_norm(x: torch.Tensor, groups: int, weight: torch.Tensor, bias: torch.Tensor, eps: float,
               silu: bool = False) -> torch.Tensor:
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    n, c = x.shape[0], x.shape[1]
    hw = x.numel() // (n * c) if x.numel() else 0
    y = torch.empty_like(x)
    if y.numel() == 0:
        return y
    cpg = c // groups
    ng = n * groups
    if cpg * hw <= FUSED_MAX:
        block = min(BLOCK, triton.next_power_of_2(cpg * hw))
        _gn_fused_kernel[(ng,)](x, weight, bias, y, c, hw, cpg, groups, eps, SILU=silu, BLOCK=block,
                                num_warps=NUM_WARPS)
        return y
    chunk = min(CHUNK, triton.next_power_of_2(hw))
    block = min(BLOCK, chunk)
    n_hwc = triton.cdiv(hw, chunk)
    parts = torch.empty((ng, cpg * n_hwc, 2), device=x.device, dtype=torch.float32)
    grid = (ng, cpg * n_hwc)
    _gn_partial_kernel[grid](x, parts, hw, cpg, n_hwc, CHUNK=chunk, BLOCK=block, num_warps=NUM_WARPS)
    _gn_apply_kernel[grid](x, parts, weight, bias, y, hw, cpg, groups, n_hwc, ng, eps, SILU=silu, CHUNK=chunk,
                           BLOCK=block, BLOCK_S=BLOCK_S, num_warps=NUM_WARPS)
    return y


class ModelNew(nn.Module):
    def __init__(self, channels: int, groups: int):
        super().__init__()
        self.groups = groups
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(channels))
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return group_norm(x, self.groups, self.weight, self.bias, EPS, silu=True)
