"""CPU reference kernel for level1/log_softmax_vocab (rows over a vocabulary, fp32).

One read of each row for the max and the exp-sum together (block by block, in L1, rescaling the
sum when the max grows), then one pass writing y = x - (max + log(sum)). OpenMP over rows; the
vocabulary row (0.5-0.6 MB) stays in L2 between the passes. AVX-512 with its own exp where the
compiler targets it (no relaxed-IEEE flags), a branch-free scalar expf that vectorizes elsewhere.
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

#if defined(__AVX512F__)
static inline __mmask16 tail16(long left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}
#endif

extern "C" void log_softmax_rows_f32(const float* __restrict__ x, float* __restrict__ y, long rows, long cols) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const float* xr = x + r * cols;
        float* yr = y + r * cols;
#if defined(__AVX512F__)
        // One read of the row for max and sum together: each SUM_BLOCK block (in L1 after its
        // max is taken) is summed against the running max, and the fp64 total is rescaled
        // whenever the max grows. Then one pass writes x - (max + log(total)).
        float m = -INFINITY;
        double total = 0.0;
        for (long j0 = 0; j0 < cols; j0 += SUM_BLOCK) {
            long j1 = j0 + SUM_BLOCK < cols ? j0 + SUM_BLOCK : cols;
            __m512 b0 = _mm512_set1_ps(-INFINITY), b1 = b0;
            long j = j0;
            for (; j + 32 <= j1; j += 32) {
                b0 = _mm512_max_ps(b0, _mm512_loadu_ps(xr + j));
                b1 = _mm512_max_ps(b1, _mm512_loadu_ps(xr + j + 16));
            }
            for (; j < j1; j += 16) {
                __mmask16 k = tail16(j1 - j);
                b0 = _mm512_mask_max_ps(b0, k, b0, _mm512_maskz_loadu_ps(k, xr + j));
            }
            float bm = _mm512_reduce_max_ps(_mm512_max_ps(b0, b1));
            if (bm > m) {
                if (total != 0.0) total *= std::exp((double)m - (double)bm);
                m = bm;
            }
            const __m512 vm = _mm512_set1_ps(m);
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            for (j = j0; j + 32 <= j1; j += 32) {
                s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(xr + j), vm)));
                s1 = _mm512_add_ps(s1, exp16(_mm512_sub_ps(_mm512_loadu_ps(xr + j + 16), vm)));
            }
            for (; j < j1; j += 16) {
                __mmask16 k = tail16(j1 - j);
                s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), vm))));
            }
            total += (double)_mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        }
        const __m512 shift = _mm512_set1_ps((float)((double)m + std::log(total)));
        for (long j = 0; j < cols; j += 16) {
            __mmask16 k = tail16(cols - j);
            _mm512_mask_storeu_ps(yr + j, k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, xr + j), shift));
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
            for (long j = j0; j < j1; ++j) s += vexp(xr[j] - m);
            total += s;
        }
        float shift = (float)((double)m + std::log(total));
        #pragma omp simd
        for (long j = 0; j < cols; ++j) yr[j] = xr[j] - shift;
#endif
    }
}
"""

_lib = load_cpp("log_softmax_cpu", _SOURCE, extra_cflags=("-fno-trapping-math", "-mprefer-vector-width=512"))
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
