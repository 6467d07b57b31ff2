"""CPU reference kernel for level2/ssm_chunk_decay: y = x * exp(cumsum(dt * A, -1)) in one pass.

Each chunk (a row of CHUNK elements) is scanned 16 elements at a time: dt * A in fp32 (the product
eager rounds too), an in-register prefix sum in fp64 (ATen's CPU scan accumulates fp32 in fp64, so
the running sum rounds to the same fp32 value), the carry from the last lane, then exp and the
multiply by x. Eager makes four passes over memory; torch.compile fuses the elementwise ops but
calls ATen's scalar scan between them. Rows go to OpenMP threads above PAR_MIN elements.
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

PAR_MIN = 262144  # below this many elements the call stays on one thread
TUNABLES = {"PAR_MIN": [65536, 262144, 1048576]}

_SOURCE = f"#define PAR_MIN {PAR_MIN}L\n" + r"""
#include <cmath>
#include <cstdint>
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

// Inclusive prefix sum of 8 doubles in three shift-and-add steps.
static inline __m512d scan8(__m512d v) {
    v = _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xFE, _mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0), v));
    v = _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xFC, _mm512_set_epi64(5, 4, 3, 2, 1, 0, 0, 0), v));
    v = _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xF0, _mm512_set_epi64(3, 2, 1, 0, 0, 0, 0, 0), v));
    return v;
}

static void decay_row(const float* __restrict__ x, const float* __restrict__ dt, float* __restrict__ y,
                      long n, float a) {
    const __m512 va = _mm512_set1_ps(a);
    const __m512i last = _mm512_set1_epi64(7);
    __m512d carry = _mm512_setzero_pd();
    for (long i = 0; i < n; i += 16) {
        __mmask16 m = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1u);
        __m512 d = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, dt + i), va);
        __m512d lo = _mm512_add_pd(scan8(_mm512_cvtps_pd(_mm512_castps512_ps256(d))), carry);
        __m512d hi = _mm512_add_pd(scan8(_mm512_cvtps_pd(_mm512_extractf32x8_ps(d, 1))),
                                   _mm512_permutexvar_pd(last, lo));
        carry = _mm512_permutexvar_pd(last, hi);
        __m512 s = _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), exp16(s)));
    }
}
#else
static void decay_row(const float* __restrict__ x, const float* __restrict__ dt, float* __restrict__ y,
                      long n, float a) {
    double s = 0.0;
    for (long i = 0; i < n; ++i) {
        s += (double)(dt[i] * a);
        y[i] = x[i] * std::exp((float)s);
    }
}
#endif

// rows = batch * heads * chunks; row r belongs to head (r / chunks) % heads.
extern "C" void ssm_chunk_decay_f32(const float* __restrict__ x, const float* __restrict__ dt,
                                    const float* __restrict__ a_log, float* __restrict__ y,
                                    long heads, long chunks, long rows, long n) {
    #pragma omp parallel for schedule(static) if (rows * n >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const float a = -std::exp(a_log[(r / chunks) % heads]);
        decay_row(x + r * n, dt + r * n, y + r * n, n, a);
    }
}
"""

_lib = load_cpp("ssm_chunk_decay_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.ssm_chunk_decay_f32.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_long] * 4
_lib.ssm_chunk_decay_f32.restype = None


class ModelNew(nn.Module):
    def __init__(self, heads: int):
        super().__init__()
        self.A_log = nn.Parameter(torch.zeros(heads))

    def forward(self, x: torch.Tensor, dt: torch.Tensor) -> torch.Tensor:
        a_log = self.A_log.detach().contiguous()
        if not all(t.dtype == torch.float32 for t in (x, dt, a_log)):
            raise TypeError("ssm_chunk_decay_cpu takes float32")
        if x.dim() != 4 or dt.shape != x.shape or a_log.numel() != x.shape[1]:
            raise ValueError(f"expected x and dt of shape (batch, {a_log.numel()}, chunks, chunk), got "
                             f"{tuple(x.shape)} and {tuple(dt.shape)}")
        x, dt = x.contiguous(), dt.contiguous()
        y = torch.empty_like(x)
        batch, heads, chunks, n = x.shape
        _lib.ssm_chunk_decay_f32(x.data_ptr(), dt.data_ptr(), a_log.data_ptr(), y.data_ptr(),
                                 heads, chunks, batch * heads * chunks, n)
        return y
