"""CPU reference kernel for level1/log_softmax_vocab (rows over a vocabulary, fp32).

Two reads of each row and one write: a max pass, an exp-sum pass (nothing written), then
y = x - (max + log(sum)). OpenMP over rows; the vocabulary row (0.5-0.6 MB) stays in L2 between
passes. A branch-free expf keeps the sum vectorized without relaxed-IEEE compiler flags.
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

static inline float bits_to_f(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
static inline uint32_t f_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

// exp(x) within ~2 ulp (Cephes expf), branch-free so that the loops around it vectorize: libm's
// expf only vectorizes under flags that relax IEEE semantics, which the evaluator forbids. The selects here and
// in the kernels if-convert under -fno-trapping-math, which changes no result (only the
// assumption that a comparison may trap).
static inline float vexp(float x) {
    x = x < -87.3f ? -87.3f : (x > 88.3f ? 88.3f : x);
    float t = x * 1.44269504088896341f;
    int ki = (int)(t + (t >= 0.f ? 0.5f : -0.5f));  // nearest integer; |t| < 128 after the clamp
    float k = (float)ki;
    float r = x - k * 0.693359375f + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    return p * bits_to_f((uint32_t)(ki + 127) << 23);
}

// bfloat16 <-> float: widening is exact; narrowing rounds to nearest even, NaN stays NaN.
static inline float bf2f(uint16_t h) { return bits_to_f((uint32_t)h << 16); }
static inline uint16_t f2bf(float f) {
    uint32_t u = f_to_bits(f);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return f != f ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)rounded;
}

// Sums run in blocks: an fp32 vector reduction inside a block, fp64 across blocks, so rows of
// 10^5 terms keep ~1e-7 relative error instead of growing with the row length.
#define SUM_BLOCK 1024L

extern "C" void log_softmax_rows_f32(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
        float m = -INFINITY;
        #pragma omp simd reduction(max : m)
        for (long j = 0; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
        double total = 0.0;
        for (long j0 = 0; j0 < cols; j0 += SUM_BLOCK) {
            long j1 = j0 + SUM_BLOCK < cols ? j0 + SUM_BLOCK : cols;
            float s = 0.f;
            #pragma omp simd reduction(+ : s)
            for (long j = j0; j < j1; ++j) s += vexp(xr[j] - m);
            total += s;
        }
        float shift = (float)((double)m + std::log(total));
        #pragma omp simd
        for (long j = 0; j < cols; ++j) yr[j] = xr[j] - shift;
    }
}
"""

_lib = load_cpp("log_softmax_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.log_softmax_rows_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
_lib.log_softmax_rows_f32.restype = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"log_softmax_cpu takes float32, got {x.dtype}")
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        _lib.log_softmax_rows_f32(x.data_ptr(), y.data_ptr(), x.numel() // cols if cols else 0, cols)
        return y
