"""CPU reference kernel for level2/scale_mask_softmax: scale, causal mask and softmax in one pass per row.

Row i of each (batch, head) attends to columns 0..i only, so the kernel reads and exponentiates
just those (half the matrix), in fp32 from the bf16 scores, and writes zeros past the diagonal.
Eager materialises the fp32 scores, the scaled ones, the masked ones and the fp32 softmax; a
fused compile still exponentiates the masked half. Each row is three passes in L1: the max, the
exps (kept in a per-row fp32 buffer) and their sum, then the scaled bf16 store. AVX-512 where the
compiler targets it (own exp, no relaxed-IEEE flags); plain loops elsewhere.
"""

import ctypes
import math

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

PAR_MIN = 65536  # elements below which the call stays on one thread
TUNABLES = {"PAR_MIN": [16384, 65536, 262144]}

_SOURCE = f"#define PAR_MIN {PAR_MIN}L\n" + r"""
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
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
// 16 bf16 -> 16 fp32 (exact: a bf16 is the top half of an fp32); lanes outside m read as 0.
static inline __m512 widen16(const uint16_t* p, __mmask16 m) {
    __m256i h = _mm256_maskz_loadu_epi16(m, p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// 16 fp32 -> 16 bf16, rounded to nearest, ties to even; a NaN stays a quiet NaN.
static inline __m256i narrow16(__m512 f) {
    __m512i u = _mm512_castps_si512(f);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
    __mmask16 nan = _mm512_cmp_ps_mask(f, f, _CMP_UNORD_Q);
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, nan, quiet));
}
static inline __mmask16 tail16(long left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}
#endif

static inline float widen1(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t narrow1(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if (f != f) return (uint16_t)((u >> 16) | 0x40u);
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// One row: s[0..valid) scaled, softmaxed, written as bf16; y[valid..seq) zero. buf holds seq floats.
static void row_softmax(const uint16_t* __restrict__ s, uint16_t* __restrict__ y, long valid, long seq,
                        float scale, float* __restrict__ buf) {
#if defined(__AVX512F__)
    const __m512 vs = _mm512_set1_ps(scale);
    __m512 m0 = _mm512_set1_ps(-INFINITY);
    for (long j = 0; j < valid; j += 16) {
        __mmask16 k = tail16(valid - j);
        __m512 v = _mm512_mul_ps(widen16(s + j, k), vs);
        _mm512_mask_storeu_ps(buf + j, k, v);
        m0 = _mm512_mask_max_ps(m0, k, m0, v);
    }
    const __m512 vm = _mm512_set1_ps(_mm512_reduce_max_ps(m0));
    __m512 s0 = _mm512_setzero_ps();
    for (long j = 0; j < valid; j += 16) {
        __mmask16 k = tail16(valid - j);
        __m512 e = _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, buf + j), vm)));
        _mm512_mask_storeu_ps(buf + j, k, e);
        s0 = _mm512_add_ps(s0, e);
    }
    const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(s0));
    long j = 0;
    for (; j < valid; j += 16) {
        __mmask16 k = tail16(valid - j);
        _mm256_mask_storeu_epi16(y + j, k, narrow16(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, buf + j), inv)));
    }
    j = valid;
    for (; j < seq && (j & 15); ++j) y[j] = 0;
    for (; j + 16 <= seq; j += 16) _mm256_storeu_si256((__m256i*)(y + j), _mm256_setzero_si256());
    for (; j < seq; ++j) y[j] = 0;
#else
    float m = -INFINITY;
    for (long j = 0; j < valid; ++j) { buf[j] = widen1(s[j]) * scale; m = buf[j] > m ? buf[j] : m; }
    float sum = 0.f;
    for (long j = 0; j < valid; ++j) { buf[j] = std::exp(buf[j] - m); sum += buf[j]; }
    const float inv = 1.0f / sum;
    for (long j = 0; j < valid; ++j) y[j] = narrow1(buf[j] * inv);
    for (long j = valid; j < seq; ++j) y[j] = 0;
#endif
}

// scores: (mats, seq, seq) bf16, row i of each matrix keeps columns 0..i.
extern "C" void scale_mask_softmax_bf16(const uint16_t* __restrict__ scores, uint16_t* __restrict__ out,
                                        long mats, long seq, float scale) {
    const long rows = mats * seq;
    #pragma omp parallel if (rows * seq >= PAR_MIN && rows > 1)
    {
        std::vector<float> buf((size_t)(seq > 0 ? seq : 1));
        #pragma omp for schedule(static)
        for (long r = 0; r < rows; ++r)
            row_softmax(scores + r * seq, out + r * seq, r % seq + 1, seq, scale, buf.data());
    }
}
"""

_lib = load_cpp("scale_mask_softmax_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.scale_mask_softmax_bf16.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long, ctypes.c_long,
                                         ctypes.c_float]
_lib.scale_mask_softmax_bf16.restype = None


class ModelNew(nn.Module):
    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        if scores.dtype != torch.bfloat16:
            raise TypeError(f"scale_mask_softmax_cpu takes bfloat16 scores, got {scores.dtype}")
        if scores.dim() < 2 or scores.shape[-1] != scores.shape[-2]:
            raise ValueError(f"expected (..., seq, seq) scores, got {tuple(scores.shape)}")
        scores = scores.contiguous()
        out = torch.empty_like(scores)
        seq = scores.shape[-1]
        _lib.scale_mask_softmax_bf16(scores.data_ptr(), out.data_ptr(), scores.numel() // (seq * seq) if seq else 0,
                                     seq, self.scale)
        return out
