"""CPU reference kernel for level2/cross_entropy_z_loss: logsumexp, target pick and z-loss in one read.

Each bf16 row is read once, block by block: a block is widened into an fp32 buffer in L1 while its
max is taken, then exponentiated against the running max and summed (fp32 lanes, fp64 across
blocks, the total rescaled whenever the max grows). The loss is lse - z[target] + w * lse^2 in
fp32, as the task computes it from its fp32 lse. Eager first writes an fp32 copy of the logits
and reads it twice. AVX-512 where the compiler targets it (own exp, no relaxed-IEEE flags).
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

BLOCK = 2048  # vocabulary entries per L1 block
PAR_MIN = 65536  # logits below which the call stays on one thread
TUNABLES = {"BLOCK": [1024, 2048, 4096], "PAR_MIN": [16384, 65536, 262144]}

_SOURCE = f"#define BLOCK {BLOCK}L\n#define PAR_MIN {PAR_MIN}L\n" + r"""
#include <cmath>
#include <cstdint>
#include <cstring>
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
static inline __mmask16 tail16(long left) {
    return left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1u);
}
#endif

static inline float widen1(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; std::memcpy(&f, &u, 4); return f; }

// Returns how many targets lie outside [0, vocab) (their losses are left NaN).
extern "C" long ce_z_loss_bf16(const uint16_t* __restrict__ logits, const int64_t* __restrict__ targets,
                               float* __restrict__ loss, long tokens, long vocab, float z_weight) {
    long bad = 0;
    #pragma omp parallel for schedule(static) reduction(+ : bad) if (tokens * vocab >= PAR_MIN && tokens > 1)
    for (long t = 0; t < tokens; ++t) {
        const uint16_t* row = logits + t * vocab;
        float m = -INFINITY;
        double total = 0.0;
        float buf[BLOCK];
        for (long j0 = 0; j0 < vocab; j0 += BLOCK) {
            const long n = j0 + BLOCK < vocab ? BLOCK : vocab - j0;
#if defined(__AVX512F__)
            __m512 b0 = _mm512_set1_ps(-INFINITY);
            for (long j = 0; j < n; j += 16) {
                __mmask16 k = tail16(n - j);
                __m512 v = widen16(row + j0 + j, k);
                _mm512_storeu_ps(buf + j, v);
                b0 = _mm512_mask_max_ps(b0, k, b0, v);
            }
            const float bm = _mm512_reduce_max_ps(b0);
#else
            float bm = -INFINITY;
            for (long j = 0; j < n; ++j) { buf[j] = widen1(row[j0 + j]); bm = buf[j] > bm ? buf[j] : bm; }
#endif
            if (bm > m) {
                if (total != 0.0) total *= std::exp((double)m - (double)bm);
                m = bm;
            }
#if defined(__AVX512F__)
            const __m512 vm = _mm512_set1_ps(m);
            __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
            long j = 0;
            for (; j + 32 <= n; j += 32) {
                s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(_mm512_loadu_ps(buf + j), vm)));
                s1 = _mm512_add_ps(s1, exp16(_mm512_sub_ps(_mm512_loadu_ps(buf + j + 16), vm)));
            }
            for (; j < n; j += 16) {
                __mmask16 k = tail16(n - j);
                s0 = _mm512_add_ps(s0, _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, buf + j), vm))));
            }
            total += (double)_mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
#else
            float s = 0.f;
            for (long j = 0; j < n; ++j) s += std::exp(buf[j] - m);
            total += s;
#endif
        }
        const int64_t target = targets[t];
        if (target < 0 || target >= vocab) { loss[t] = NAN; bad += 1; continue; }
        const float lse = (float)((double)m + std::log(total));
        loss[t] = (lse - widen1(row[target])) + z_weight * (lse * lse);
    }
    return bad;
}
"""

_lib = load_cpp("cross_entropy_z_loss_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.ce_z_loss_bf16.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_long, ctypes.c_long, ctypes.c_float]
_lib.ce_z_loss_bf16.restype = ctypes.c_long


class ModelNew(nn.Module):
    def __init__(self, z_weight: float):
        super().__init__()
        self.z_weight = z_weight

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if logits.dtype != torch.bfloat16 or targets.dtype != torch.int64:
            raise TypeError(f"cross_entropy_z_loss_cpu takes bfloat16 logits and int64 targets, got "
                            f"{logits.dtype} and {targets.dtype}")
        if logits.dim() != 2 or targets.shape != logits.shape[:1]:
            raise ValueError(f"expected (tokens, vocab) logits and (tokens,) targets, got "
                             f"{tuple(logits.shape)} and {tuple(targets.shape)}")
        logits, targets = logits.contiguous(), targets.contiguous()
        loss = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
        bad = _lib.ce_z_loss_bf16(logits.data_ptr(), targets.data_ptr(), loss.data_ptr(), logits.shape[0],
                                  logits.shape[1], self.z_weight)
        if bad:
            raise IndexError(f"{bad} target(s) outside [0, {logits.shape[1]})")
        return loss
