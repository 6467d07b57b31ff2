"""CPU reference kernel for level1/silu (x * sigmoid(x), fp32): one streaming pass.

x / (1 + exp(-x)) with a branch-free expf (clamped, so exp(-x) never overflows to inf for very
negative x), so the loop vectorizes (AVX via -march=native) without relaxed-IEEE compiler flags.
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

extern "C" void silu_f32(const float* __restrict__ x, float* __restrict__ y, long n) {
    long chunks = (n + CHUNK - 1) / CHUNK;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < chunks; ++c) {
        long begin = c * CHUNK, end = begin + CHUNK < n ? begin + CHUNK : n;
        #pragma omp simd
        for (long i = begin; i < end; ++i) {
            float v = x[i];
            y[i] = v / (1.0f + vexp(-v));
        }
    }
}
"""

_lib = load_cpp("silu_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.silu_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
_lib.silu_f32.restype = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"silu_cpu takes float32, got {x.dtype}")
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.silu_f32(x.data_ptr(), y.data_ptr(), x.numel())
        return y
