"""H100 reference kernel for level2/swiglu_backward: for out = silu(gate) * up, the gradients
grad_up = grad * silu(gate) and grad_gate = grad * up * s * (1 + gate * (1 - s)), s = sigmoid(gate),
in fp32 from bf16 inputs, stored in bf16.

A flat elementwise kernel over the contiguous tensors: each program takes BLOCK consecutive
elements (BLOCK / (32 * warps) per thread, in 16-byte vectors of 8 bf16), reads gate, up and grad
once and writes both gradients once: 10 bytes per element, the minimum. sigmoid is 1 / (1 + exp(-x))
in fp32 (exp overflowing to inf for very negative x gives s = 0, the right limit). The tail block is
masked; offsets are int64 (the large shape has 470M elements).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK = 4096  # elements per program
NUM_WARPS = 8
TUNABLES = {"BLOCK": [1024, 2048, 4096, 8192], "NUM_WARPS": [4, 8, 16]}


@triton.jit
def _swiglu_bwd_kernel(gate_ptr, up_ptr, grad_ptr, dgate_ptr, dup_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(gate_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(up_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    g = tl.load(grad_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    s = 1.0 / (1.0 + tl.exp(-a))
    tl.store(dup_ptr + offs, (g * (a * s)).to(dup_ptr.dtype.element_ty), mask=mask)
    tl.store(dgate_ptr + offs, (g * b * (s * (1.0 + a * (1.0 - s)))).to(dgate_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, gate: torch.Tensor, up: torch.Tensor, grad_out: torch.Tensor):
        a = gate.contiguous()
        b = up.contiguous()
        g = grad_out.contiguous()
        d_gate = torch.empty_like(a)
        d_up = torch.empty_like(b)
        n = a.numel()
        if n:
            _swiglu_bwd_kernel[(triton.cdiv(n, BLOCK),)](a, b, g, d_gate, d_up, n, BLOCK=BLOCK, num_warps=NUM_WARPS)
        return d_gate, d_up
