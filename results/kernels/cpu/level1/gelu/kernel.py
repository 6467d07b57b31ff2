"""CPU reference kernel for level1/gelu (exact erf GELU, fp32): one streaming pass.

gelu(x) = x * Phi(x), Phi(x) = erfc(-x / sqrt 2) / 2, with erfc from the Numerical Recipes
Chebyshev fit (relative error < 1.2e-7 everywhere) on top of a branch-free expf, so the loop
vectorizes (AVX via -march=native) without relaxed-IEEE compiler flags. No tanh approximation. For x < 0 the
result is x * erfc(|x| / sqrt 2) / 2 directly, with no cancellation in 1 + erf.
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

CHUNK = 32768  # elements per OpenMP work item
PAR_MIN = 65536  # below this many elements the call stays on one thread
TUNABLES = {"CHUNK": [8192, 32768, 131072], "PAR_MIN": [16384, 65536, 262144]}

_SOURCE = f"#define CHUNK {CHUNK}L\n#define PAR_MIN {PAR_MIN}L\n" + r"""
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

// erfc(z) for z >= 0, fractional error < 1.2e-7 (Numerical Recipes' erfcc).
static inline float erfc_pos(float z) {
    float t = 1.0f / (1.0f + 0.5f * z);
    float p = 0.17087277f;
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    return t * vexp(-z * z + p);
}

extern "C" void gelu_f32(const float* __restrict__ x, float* __restrict__ y, long n) {
    long chunks = (n + CHUNK - 1) / CHUNK;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < chunks; ++c) {
        long begin = c * CHUNK, end = begin + CHUNK < n ? begin + CHUNK : n;
        #pragma omp simd
        for (long i = begin; i < end; ++i) {
            float v = x[i];
            float half_erfc = 0.5f * erfc_pos(std::fabs(v) * 0.70710678118654752f);
            float phi = v >= 0.f ? 1.0f - half_erfc : half_erfc;
            y[i] = v * phi;
        }
    }
}
"""

_lib = load_cpp("gelu_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.gelu_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
_lib.gelu_f32.restype = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"gelu_cpu takes float32, got {x.dtype}")
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.gelu_f32(x.data_ptr(), y.data_ptr(), x.numel())
        return y
