"""H100 reference kernel for level1/causal_conv1d_bf16: causal depthwise conv1d with a short kernel and SiLU,
out[b, c, t] = silu(sum_j w[c, j] * x[b, c, t - (K-1) + j] + bias[c]), bf16 in and out.

The input is viewed as B*C rows of T steps; a program computes a BLOCK_R x BLOCK_T tile (whole rows when
T <= MAX_BLOCK_T, else several time tiles per row). The kernel width K is a compile-time constant, so the
K taps unroll into K shifted, masked loads of the same row (t - (K-1) + j < 0 reads the causal zero
padding; a tile's look-back into the previous tile is just a masked load, no halo exchange); they overlap
almost entirely and are served by L1, so DRAM sees one bf16 read of x and one bf16 write of the output,
the minimum for this memory-bound op. Each row's K weights and bias are loaded once per row. As in the
reference, everything is computed in fp32 (bf16 loads upcast, fp32 FMAs, fp32 SiLU as x * 1/(1+exp(-x)))
and rounded to bf16 once when storing. Weights and bias may be bf16 or fp32. Ragged T, channel counts and
kernel widths are handled by masks.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE = 2048  # outputs per program (BLOCK_R * BLOCK_T)
MAX_BLOCK_T = 1024  # longest time tile
NUM_WARPS = 8
TUNABLES = {"TILE": [1024, 2048, 4096], "MAX_BLOCK_T": [512, 1024, 2048], "NUM_WARPS": [4, 8]}


@triton.jit
def _causal_conv1d_silu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, R, C, T,
                               KW: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_T: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    ts = tl.program_id(1) * BLOCK_T + tl.arange(0, BLOCK_T)
    r_ok = rows < R
    t_ok = ts < T
    ch = rows % C
    row_off = rows.to(tl.int64) * T
    acc = tl.zeros((BLOCK_R, BLOCK_T), dtype=tl.float32)
    acc += tl.load(b_ptr + ch, mask=r_ok, other=0.0).to(tl.float32)[:, None]
    for j in tl.static_range(KW):
        t_in = ts - (KW - 1 - j)
        m = r_ok[:, None] & ((t_in >= 0) & t_ok)[None, :]
        v = tl.load(x_ptr + row_off[:, None] + t_in[None, :], mask=m, other=0.0).to(tl.float32)
        wj = tl.load(w_ptr + ch * KW + j, mask=r_ok, other=0.0).to(tl.float32)
        acc += v * wj[:, None]
    out = acc / (1.0 + tl.exp(-acc))
    tl.store(y_ptr + row_off[:, None] + ts[None, :], out.to(y_ptr.dtype.element_ty),
             mask=r_ok[:, None] & t_ok[None, :])


def causal_conv1d_silu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    weight = weight.contiguous()
    bias = bias.contiguous()
    b, c, t = x.shape
    kw = weight.shape[-1]
    y = torch.empty_like(x)
    rows = b * c
    block_t = min(MAX_BLOCK_T, triton.next_power_of_2(t))
    block_r = max(1, TILE // block_t)
    grid = (triton.cdiv(rows, block_r), triton.cdiv(t, block_t))
    _causal_conv1d_silu_kernel[grid](x, weight, bias, y, rows, c, t, KW=kw, BLOCK_R=block_r, BLOCK_T=block_t,
                                     num_warps=NUM_WARPS)
    return y


class ModelNew(nn.Module):
    def __init__(self, channels: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(channels, 1, width) * width**-0.5)
        self.bias = nn.Parameter(0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return causal_conv1d_silu(x, self.weight, self.bias)
