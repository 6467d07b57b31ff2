"""CPU reference kernel for level2/bias_residual_layer_norm: total = (x + bias) + residual in bf16,
then LayerNorm(total) in fp32 with its affine weight and bias; returns (normed bf16, total bf16).

Per row, one sweep forms `total` with the two bf16 roundings PyTorch makes (x + bias, then
+ residual), writes it and sums it; a second sweep over the row, still in cache, takes the
centred sum of squares (two-pass variance, as PyTorch's CPU LayerNorm is exact to fp32); a third
writes the output. Eager runs five kernels with fp32 intermediates. OpenMP over rows above PAR_MIN.
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

PAR_MIN = 32768  # total elements below which the call stays on one thread
TUNABLES = {"PAR_MIN": [8192, 32768, 262144]}

_SOURCE = f"#define PAR_MIN {PAR_MIN}L\n" + r"""
#include <cstdint>
#include <cstring>
#include <cmath>

// bf16 is the top half of an fp32: widening shifts it up; narrowing rounds the low half to nearest,
// ties to even, and keeps a NaN a (quiet) NaN.
static inline float widen(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t narrow(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    uint16_t nearest = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return f != f ? (uint16_t)((u >> 16) | 0x40u) : nearest;  // a select, so the loops vectorize
}

extern "C" void bias_residual_layer_norm_bf16(
        const uint16_t* __restrict__ x, const uint16_t* __restrict__ res, const uint16_t* __restrict__ bias,
        const uint16_t* __restrict__ w, const uint16_t* __restrict__ b, uint16_t* __restrict__ out,
        uint16_t* __restrict__ total, long rows, long cols, float eps) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const long off = r * cols;
        float sum = 0.f;
        #pragma omp simd reduction(+ : sum)
        for (long c = 0; c < cols; ++c) {
            uint16_t t = narrow(widen(narrow(widen(x[off + c]) + widen(bias[c]))) + widen(res[off + c]));
            total[off + c] = t;
            sum += widen(t);
        }
        const float mean = sum / (float)cols;
        float sq = 0.f;
        #pragma omp simd reduction(+ : sq)
        for (long c = 0; c < cols; ++c) {
            float d = widen(total[off + c]) - mean;
            sq += d * d;
        }
        const float inv = 1.0f / std::sqrt(sq / (float)cols + eps);
        #pragma omp simd
        for (long c = 0; c < cols; ++c)
            out[off + c] = narrow((widen(total[off + c]) - mean) * inv * widen(w[c]) + widen(b[c]));
    }
}
"""

_lib = load_cpp("bias_residual_layer_norm_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.bias_residual_layer_norm_bf16.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_long, ctypes.c_long, ctypes.c_float]
_lib.bias_residual_layer_norm_bf16.restype = None


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        # Held in bf16, as the task's model is: its weights load into them exactly, and a call
        # converts nothing (a per-call cast would be PyTorch compute inside forward).
        self.bias = nn.Parameter(torch.zeros(hidden, dtype=torch.bfloat16))
        self.ln_weight = nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))
        self.ln_bias = nn.Parameter(torch.zeros(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        params = [p.detach().contiguous() for p in (self.bias, self.ln_weight, self.ln_bias)]
        if not all(t.dtype == torch.bfloat16 for t in (x, residual, *params)):
            raise TypeError("bias_residual_layer_norm_cpu takes bfloat16 activations and weights")
        x, residual = x.contiguous(), residual.contiguous()
        out, total = torch.empty_like(x), torch.empty_like(x)
        cols = x.shape[-1]
        _lib.bias_residual_layer_norm_bf16(x.data_ptr(), residual.data_ptr(), *(p.data_ptr() for p in params),
                                           out.data_ptr(), total.data_ptr(), x.numel() // cols if cols else 0,
                                           cols, 1e-5)
        return out, total
