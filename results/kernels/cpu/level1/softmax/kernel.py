"""CPU reference kernel for level1/softmax (rows, fp32): max, exp-and-sum, scale, one row at a time.

Each row is read from memory once: the exp pass writes exp(x - max) into the output while
summing, and the scaling pass runs over that row while it is still in cache. OpenMP over rows;
a branch-free expf keeps every pass vectorized without relaxed-IEEE compiler flags.
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
#endif

extern "C" void softmax_rows_f32(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
#if defined(__AVX512F__)
        // Three passes over a row that stays in L1/L2: the max, exp(x - max) stored and summed
        // (fp32 lanes within a block, fp64 across blocks), then the scale.
        __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
        long j = 0;
        for (; j + 32 <= cols; j += 32) {
            m0 = _mm512_max_ps(m0, _mm512_loadu_ps(xr + j));
            m1 = _mm512_max_ps(m1, _mm512_loadu_ps(xr + j + 16));
        }
        for (; j < cols; j += 16) {
            __mmask16 k = cols - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - j)) - 1u);
            m0 = _mm512_mask_max_ps(m0, k, m0, _mm512_maskz_loadu_ps(k, xr + j));
        }
        const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
        double total = 0.0;
        for (long j0 = 0; j0 < cols; j0 += SUM_BLOCK) {
            long j1 = j0 + SUM_BLOCK < cols ? j0 + SUM_BLOCK : cols;
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            for (j = j0; j + 32 <= j1; j += 32) {
                __m512 e0 = exp16(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vm));
                __m512 e1 = exp16(_mm512_sub_ps(_mm512_loadu_ps(xr + j + 16), vm));
                _mm512_storeu_ps(yr + j, e0);
                _mm512_storeu_ps(yr + j + 16, e1);
                s0 = _mm512_add_ps(s0, e0);
                s1 = _mm512_add_ps(s1, e1);
            }
            for (; j < j1; j += 16) {
                __mmask16 k = j1 - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (j1 - j)) - 1u);
                __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), vm)));
                _mm512_mask_storeu_ps(yr + j, k, e);
                s0 = _mm512_add_ps(s0, e);
            }
            total += (double)_mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        }
        const __m512 inv = _mm512_set1_ps((float)(1.0 / total));
        for (j = 0; j < cols; j += 16) {
            __mmask16 k = cols - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - j)) - 1u);
            _mm512_mask_storeu_ps(yr + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, yr + j), inv));
        }
#else
        float m = -INFINITY;
        #pragma omp simd reduction(max : m)
        for (long j = 0; j < cols; ++j) m = xr[j] > m ? xr[j] : m;
        double total = 0.0;
        for (long j0 = 0; j0 < cols; j0 += SUM_BLOCK) {
            long j1 = j0 + SUM_BLOCK < cols ? j0 + SUM_BLOCK : cols;
            float s = 0.f;
            #pragma omp simd reduction(+ : s)
            for (long j = j0; j < j1; ++j) {
                float e = vexp(xr[j] - m);
                yr[j] = e;
                s += e;
            }
            total += s;
        }
        float inv = (float)(1.0 / total);
        #pragma omp simd
        for (long j = 0; j < cols; ++j) yr[j] *= inv;
#endif
    }
}
"""

_lib = load_cpp("softmax_cpu", _SOURCE, extra_cflags=("-fno-trapping-math", "-mprefer-vector-width=512"))
_lib.softmax_rows_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]
_lib.softmax_rows_f32.restype = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"softmax_cpu takes float32, got {x.dtype}")
        x = x.contiguous()
        y = torch.empty_like(x)
        cols = x.shape[-1]
        _lib.softmax_rows_f32(x.data_ptr(), y.data_ptr(), x.numel() // cols if cols else 0, cols)
        return y
