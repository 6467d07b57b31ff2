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

// erfc(z) for z >= 0 within 1.5e-7 absolute (Abramowitz & Stegun 7.1.26, the form eager's
// vectorised erf uses too): a 5-term polynomial in t = 1 / (1 + p z) times exp(-z^2). In
// gelu(x) = x * erfc(|x| / sqrt 2) / 2 this errs by under 1e-7 * |x|, far inside the tolerance.
static inline float erfc_pos(float z) {
    float t = 1.0f / (1.0f + 0.3275911f * z);
    float p = 1.061405429f;
    p = p * t - 1.453152027f;
    p = p * t + 1.421413741f;
    p = p * t - 0.284496736f;
    p = p * t + 0.254829592f;
    return p * t * vexp(-z * z);
}

#if defined(__AVX512F__)
#include <immintrin.h>
// exp(x) on 16 lanes, within ~2 ulp: Cephes' polynomial on r = x - n ln2 (ln2 split in two), then
// scalef(p, n) = p * 2^n, which also gives 0 and denormals below the clamp without bit tricks.
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.7f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n);
}
// 1 / d on 16 lanes: the 14-bit estimate and one Newton step (relative error ~1e-8).
static inline __m512 recip16(__m512 d) {
    __m512 t = _mm512_rcp14_ps(d);
    return _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, _mm512_set1_ps(2.0f)));
}
#endif

extern "C" void gelu_f32(const float* __restrict__ x, float* __restrict__ y, long n) {
    long chunks = (n + CHUNK - 1) / CHUNK;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < chunks; ++c) {
        long begin = c * CHUNK, end = begin + CHUNK < n ? begin + CHUNK : n;
        long i = begin;
#if defined(__AVX512F__)
        const __m512 k = _mm512_set1_ps(0.70710678118654752f), half = _mm512_set1_ps(0.5f);
        for (; i < end; i += 16) {
            __mmask16 m = end - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (end - i)) - 1u);
            __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            __m512 z = _mm512_mul_ps(_mm512_abs_ps(v), k);
            __m512 t = recip16(_mm512_fmadd_ps(z, _mm512_set1_ps(0.3275911f), _mm512_set1_ps(1.0f)));
            __m512 p = _mm512_set1_ps(1.061405429f);
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-1.453152027f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(1.421413741f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(-0.284496736f));
            p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(0.254829592f));
            __m512 he = _mm512_mul_ps(_mm512_mul_ps(p, t), _mm512_mul_ps(half, exp16(_mm512_mul_ps(z, _mm512_sub_ps(_mm512_setzero_ps(), z)))));
            __mmask16 pos = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_GE_OQ);
            __m512 phi = _mm512_mask_sub_ps(he, pos, _mm512_set1_ps(1.0f), he);
            _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(v, phi));
        }
#else
        #pragma omp simd
        for (long j = i; j < end; ++j) {  // OpenMP's simd needs the loop's own variable
            float v = x[j];
            float half_erfc = 0.5f * erfc_pos(std::fabs(v) * 0.70710678118654752f);
            float phi = v >= 0.f ? 1.0f - half_erfc : half_erfc;
            y[j] = v * phi;
        }
#endif
    }
}
"""

_lib = load_cpp("gelu_cpu", _SOURCE, extra_cflags=("-fno-trapping-math", "-mprefer-vector-width=512"))
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
