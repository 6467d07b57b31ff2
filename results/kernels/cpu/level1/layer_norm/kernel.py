"""CPU reference kernel for level1/layer_norm (bf16 in and out, fp32 statistics, affine).

One fused kernel per row: mean, then the variance as the mean of squared deviations (two-pass,
so no cancellation for inputs with a large mean), then (x - mean) * rstd * w + b, all while the
row sits in cache. Eager PyTorch casts to fp32, normalises, and casts back: three round trips to
memory. OpenMP over rows. Takes bfloat16 or float32 activations and parameters.
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

static inline float load(float v) { return v; }
static inline float load(uint16_t v) { return bf2f(v); }
template <typename T> static inline T store(float v);
template <> inline float store<float>(float v) { return v; }
template <> inline uint16_t store<uint16_t>(float v) { return f2bf(v); }

template <typename X, typename W>
static void layer_norm(const X* __restrict__ x, const W* __restrict__ w, const W* __restrict__ b,
                       X* __restrict__ y, long rows, long cols, float eps) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const X* xr = x + r * cols;
        X* yr = y + r * cols;
        float s = 0.f;
        #pragma omp simd reduction(+ : s)
        for (long j = 0; j < cols; ++j) s += load(xr[j]);
        float mean = s / (float)cols;
        float ss = 0.f;
        #pragma omp simd reduction(+ : ss)
        for (long j = 0; j < cols; ++j) { float d = load(xr[j]) - mean; ss += d * d; }
        float rstd = 1.0f / std::sqrt(ss / (float)cols + eps);
        #pragma omp simd
        for (long j = 0; j < cols; ++j) yr[j] = store<X>((load(xr[j]) - mean) * rstd * load(w[j]) + load(b[j]));
    }
}

extern "C" void layer_norm_cpu(const void* x, const void* w, const void* b, void* y, long rows, long cols,
                               float eps, int x_bf16, int w_bf16) {
    if (x_bf16 && w_bf16)
        layer_norm((const uint16_t*)x, (const uint16_t*)w, (const uint16_t*)b, (uint16_t*)y, rows, cols, eps);
    else if (x_bf16)
        layer_norm((const uint16_t*)x, (const float*)w, (const float*)b, (uint16_t*)y, rows, cols, eps);
    else if (w_bf16)
        layer_norm((const float*)x, (const uint16_t*)w, (const uint16_t*)b, (float*)y, rows, cols, eps);
    else
        layer_norm((const float*)x, (const float*)w, (const float*)b, (float*)y, rows, cols, eps);
}
"""

_lib = load_cpp("layer_norm_cpu", _SOURCE, extra_cflags=("-fno-trapping-math", "-mprefer-vector-width=512"))
_lib.layer_norm_cpu.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long,
                                ctypes.c_long, ctypes.c_float, ctypes.c_int, ctypes.c_int]
_lib.layer_norm_cpu.restype = None
_DTYPES = (torch.float32, torch.bfloat16)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w, b = self.weight.detach(), self.bias.detach()
        if x.dtype not in _DTYPES or w.dtype not in _DTYPES or b.dtype != w.dtype:
            raise TypeError(f"layer_norm_cpu takes float32 or bfloat16, got {x.dtype}, {w.dtype}, {b.dtype}")
        x, w, b = x.contiguous(), w.contiguous(), b.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        _lib.layer_norm_cpu(x.data_ptr(), w.data_ptr(), b.data_ptr(), y.data_ptr(), x.numel() // cols if cols else 0,
                            cols, self.eps, x.dtype == torch.bfloat16, w.dtype == torch.bfloat16)
        return y
