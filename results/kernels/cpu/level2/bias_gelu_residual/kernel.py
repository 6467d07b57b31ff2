"""CPU reference kernel for level2/bias_gelu_residual: residual + alpha[c] * gelu(x + bias[c]), fp32.

Eager PyTorch makes three passes with two full-size intermediates (x + bias, gelu, then the
scaled residual add); this makes one: two streams in, one out. The exact (erf) GELU is computed
as v * Phi(v), Phi from erfc of |v| / sqrt 2 by the Abramowitz-Stegun 7.1.26 form (absolute error
under 1.5e-7) over a branch-free exp, so the column loop vectorizes without relaxed-IEEE flags.
OpenMP over rows above PAR_MIN elements (the evaluator pins CPU jobs to one thread).
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

PAR_MIN = 65536  # total elements below which the call stays on one thread
TUNABLES = {"PAR_MIN": [16384, 65536, 262144]}

_SOURCE = f"#define PAR_MIN {PAR_MIN}L\n" + r"""
#include <cstdint>
#include <cstring>
#include <cmath>

static inline float as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// e^x for x <= 0 (all this kernel needs): x = n ln2 + r, |r| <= ln2 / 2, then a degree-6 Taylor
// polynomial in r (relative error about 1.3e-7) times 2^n built in the exponent bits.
static inline float exp_nonpos(float x) {
    x = x < -87.0f ? -87.0f : x;
    float n = std::floor(x * 1.4426950408889634f + 0.5f);
    float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    return p * as_float((uint32_t)((int)n + 127) << 23);
}

// Phi(v) = P(N(0,1) <= v) = erfc(-v / sqrt 2) / 2; for v < 0 taken directly from the small tail.
static inline float phi(float v) {
    float z = std::fabs(v) * 0.7071067811865476f;
    float t = 1.0f / (1.0f + 0.3275911f * z);
    float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f
                 + t * 1.061405429f))));
    float half_erfc = 0.5f * poly * exp_nonpos(-z * z);
    return v >= 0.f ? 1.0f - half_erfc : half_erfc;
}

extern "C" void bias_gelu_residual_f32(const float* __restrict__ x, const float* __restrict__ res,
                                       const float* __restrict__ bias, const float* __restrict__ alpha,
                                       float* __restrict__ out, long rows, long cols) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const long off = r * cols;
        #pragma omp simd
        for (long c = 0; c < cols; ++c) {
            float v = x[off + c] + bias[c];
            out[off + c] = res[off + c] + alpha[c] * (v * phi(v));
        }
    }
}
"""

_lib = load_cpp("bias_gelu_residual_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.bias_gelu_residual_f32.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_long, ctypes.c_long]
_lib.bias_gelu_residual_f32.restype = None


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(hidden))
        self.alpha = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        bias, alpha = self.bias.detach().contiguous(), self.alpha.detach().contiguous()
        if not all(t.dtype == torch.float32 for t in (x, residual, bias, alpha)):
            raise TypeError("bias_gelu_residual_cpu takes float32")
        x, residual = x.contiguous(), residual.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[-1]
        _lib.bias_gelu_residual_f32(x.data_ptr(), residual.data_ptr(), bias.data_ptr(), alpha.data_ptr(),
                                    out.data_ptr(), x.numel() // cols if cols else 0, cols)
        return out
