# format: Triton kernel in a KernelBench answer module
# task: level1/relu
# backend: triton (checked in Triton's interpreter and compiled for sm_90a without a GPU)
import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 1024


@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.where(x < 0, 0.0, x), mask=mask)  # NaN stays NaN


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _relu[(triton.cdiv(n, BLOCK),)](x, y, n, BLOCK=BLOCK)
        return y
