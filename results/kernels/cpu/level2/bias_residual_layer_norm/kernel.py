"""CPU reference kernel for level2/bias_residual_layer_norm: total = (x + bias) + residual in bf16,
then LayerNorm(total) in fp32 with its affine weight and bias; returns (normed bf16, total bf16).

Per row, one sweep forms `total` with the two bf16 roundings PyTorch makes (x + bias, then
+ residual), writes it and sums it; a second sweep over the row, still in cache, takes the
centred sum of squares (two-pass variance, as PyTorch's CPU LayerNorm is exact to fp32); a third
writes the output. Eager runs five kernels with fp32 intermediates. OpenMP over rows above PAR_MIN.
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

// bf16 is the top half of an fp32: widening shifts it up; narrowing rounds the low half to nearest,
// ties to even, and keeps a NaN a (quiet) NaN.
static inline float widen(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }
static inline uint16_t narrow(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    uint16_t nearest = (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
    return f != f ? (uint16_t)((u >> 16) | 0x40u) : nearest;  // a select, so the loops vectorize
}

#if defined(__AVX512F__)
#include <immintrin.h>
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

extern "C" void bias_residual_layer_norm_bf16(
        const uint16_t* __restrict__ x, const uint16_t* __restrict__ res, const uint16_t* __restrict__ bias,
        const uint16_t* __restrict__ w, const uint16_t* __restrict__ b, uint16_t* __restrict__ out,
        uint16_t* __restrict__ total, long rows, long cols, float eps) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const long off = r * cols;
#if defined(__AVX512F__)
        // Pass 1 writes the bf16 sum (rounded twice, as eager adds the bias, then the residual)
        // and sums it; passes 2 and 3 read the row back from L1.
        __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
        long c = 0;
        for (; c + 32 <= cols; c += 32) {
            __m512 t0 = widen16(x + off + c, 0xFFFF), t1 = widen16(x + off + c + 16, 0xFFFF);
            __m256i h0 = narrow16(_mm512_add_ps(t0, widen16(bias + c, 0xFFFF)));
            __m256i h1 = narrow16(_mm512_add_ps(t1, widen16(bias + c + 16, 0xFFFF)));
            t0 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16));
            t1 = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16));
            h0 = narrow16(_mm512_add_ps(t0, widen16(res + off + c, 0xFFFF)));
            h1 = narrow16(_mm512_add_ps(t1, widen16(res + off + c + 16, 0xFFFF)));
            _mm256_storeu_si256((__m256i*)(total + off + c), h0);
            _mm256_storeu_si256((__m256i*)(total + off + c + 16), h1);
            acc0 = _mm512_add_ps(acc0, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h0), 16)));
            acc1 = _mm512_add_ps(acc1, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h1), 16)));
        }
        for (; c < cols; c += 16) {
            __mmask16 m = tail16(cols - c);
            __m512 t = widen16(x + off + c, m);
            __m256i h = narrow16(_mm512_add_ps(t, widen16(bias + c, m)));
            t = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
            h = narrow16(_mm512_add_ps(t, widen16(res + off + c, m)));
            _mm256_mask_storeu_epi16(total + off + c, m, h);
            acc0 = _mm512_add_ps(acc0, widen16(total + off + c, m));
        }
        const float mean = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) / (float)cols;
        const __m512 vmean = _mm512_set1_ps(mean);
        __m512 sq0 = _mm512_setzero_ps(), sq1 = _mm512_setzero_ps();
        for (c = 0; c + 32 <= cols; c += 32) {
            __m512 d0 = _mm512_sub_ps(widen16(total + off + c, 0xFFFF), vmean);
            __m512 d1 = _mm512_sub_ps(widen16(total + off + c + 16, 0xFFFF), vmean);
            sq0 = _mm512_fmadd_ps(d0, d0, sq0);
            sq1 = _mm512_fmadd_ps(d1, d1, sq1);
        }
        for (; c < cols; c += 16) {
            __mmask16 m = tail16(cols - c);
            __m512 d = _mm512_maskz_sub_ps(m, widen16(total + off + c, m), vmean);
            sq0 = _mm512_fmadd_ps(d, d, sq0);
        }
        const float inv = 1.0f / std::sqrt(_mm512_reduce_add_ps(_mm512_add_ps(sq0, sq1)) / (float)cols + eps);
        const __m512 vinv = _mm512_set1_ps(inv);
        for (c = 0; c < cols; c += 16) {
            __mmask16 m = tail16(cols - c);
            __m512 d = _mm512_mul_ps(_mm512_sub_ps(widen16(total + off + c, m), vmean), vinv);
            __m512 y = _mm512_fmadd_ps(d, widen16(w + c, m), widen16(b + c, m));
            _mm256_mask_storeu_epi16(out + off + c, m, narrow16(y));
        }
#else
        float sum = 0.f;
        #pragma omp simd reduction(+ : sum)
        for (long c = 0; c < cols; ++c) {
            uint16_t t = narrow(widen(narrow(widen(x[off + c]) + widen(bias[c]))) + widen(res[off + c]));
            total[off + c] = t;
            sum += widen(t);
        }
        const float mean = sum / (float)cols;
        float sq = 0.f;
        #pragma omp simd reduction(+ : sq)
        for (long c = 0; c < cols; ++c) {
            float d = widen(total[off + c]) - mean;
            sq += d * d;
        }
        const float inv = 1.0f / std::sqrt(sq / (float)cols + eps);
        #pragma omp simd
        for (long c = 0; c < cols; ++c)
            out[off + c] = narrow((widen(total[off + c]) - mean) * inv * widen(w[c]) + widen(b[c]));
#endif
    }
}
"""

_lib = load_cpp("bias_residual_layer_norm_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.bias_residual_layer_norm_bf16.argtypes = [ctypes.c_void_p] * 7 + [ctypes.c_long, ctypes.c_long, ctypes.c_float]
_lib.bias_residual_layer_norm_bf16.restype = None


class ModelNew(nn.Module):
    def __init__(self, hidden: int):
        super().__init__()
        # Held in bf16, as the task's model is: its weights load into them exactly, and a call
        # converts nothing (a per-call cast would be PyTorch compute inside forward).
        self.bias = nn.Parameter(torch.zeros(hidden, dtype=torch.bfloat16))
        self.ln_weight = nn.Parameter(torch.ones(hidden, dtype=torch.bfloat16))
        self.ln_bias = nn.Parameter(torch.zeros(hidden, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        params = [p.detach().contiguous() for p in (self.bias, self.ln_weight, self.ln_bias)]
        if not all(t.dtype == torch.bfloat16 for t in (x, residual, *params)):
            raise TypeError("bias_residual_layer_norm_cpu takes bfloat16 activations and weights")
        x, residual = x.contiguous(), residual.contiguous()
        out, total = torch.empty_like(x), torch.empty_like(x)
        cols = x.shape[-1]
        _lib.bias_residual_layer_norm_bf16(x.data_ptr(), residual.data_ptr(), *(p.data_ptr() for p in params),
                                           out.data_ptr(), total.data_ptr(), x.numel() // cols if cols else 0,
                                           cols, 1e-5)
        return out, total
