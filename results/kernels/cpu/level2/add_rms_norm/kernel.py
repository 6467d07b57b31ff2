"""CPU reference kernel for level2/add_rms_norm: total = x + residual (bf16), then
RMSNorm(total) * w in fp32, returning (normed bf16, total bf16).

One fused kernel per row: the first sweep forms the bf16 sum (rounded as PyTorch rounds it),
writes it as `total` and accumulates its sum of squares; the second sweep reads the row's `total`
back while it is in cache and writes the normalised output. Eager PyTorch runs about eight
kernels with fp32 intermediates. OpenMP over rows; the weight may be bf16 or fp32.
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
// bfloat16 <-> float: widening is exact; narrowing rounds to nearest even, NaN stays NaN.
static inline float bf2f(uint16_t h) { return bits_to_f((uint32_t)h << 16); }
static inline uint16_t f2bf(float f) {
    uint32_t u = f_to_bits(f);
    uint32_t rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    return f != f ? (uint16_t)((u >> 16) | 0x40u) : (uint16_t)rounded;
}
static inline float load(float v) { return v; }
static inline float load(uint16_t v) { return bf2f(v); }

template <typename W>
static void add_rms_norm(const uint16_t* __restrict__ x, const uint16_t* __restrict__ res, const W* __restrict__ w,
                         uint16_t* __restrict__ out, uint16_t* __restrict__ total, long rows, long cols, float eps) {
    #pragma omp parallel for schedule(static) if (rows * cols >= PAR_MIN && rows > 1)
    for (long r = 0; r < rows; ++r) {
        const long off = r * cols;
        float ss = 0.f;
        #pragma omp simd reduction(+ : ss)
        for (long j = 0; j < cols; ++j) {
            uint16_t t = f2bf(bf2f(x[off + j]) + bf2f(res[off + j]));
            total[off + j] = t;
            float tf = bf2f(t);
            ss += tf * tf;
        }
        float scale = 1.0f / std::sqrt(ss / (float)cols + eps);
        #pragma omp simd
        for (long j = 0; j < cols; ++j) out[off + j] = f2bf((bf2f(total[off + j]) * scale) * load(w[j]));
    }
}

extern "C" void add_rms_norm_cpu(const void* x, const void* res, const void* w, void* out, void* total, long rows,
                                 long cols, float eps, int w_bf16) {
    const uint16_t* xb = (const uint16_t*)x;
    const uint16_t* rb = (const uint16_t*)res;
    if (w_bf16) add_rms_norm(xb, rb, (const uint16_t*)w, (uint16_t*)out, (uint16_t*)total, rows, cols, eps);
    else add_rms_norm(xb, rb, (const float*)w, (uint16_t*)out, (uint16_t*)total, rows, cols, eps);
}
"""

_lib = load_cpp("add_rms_norm_cpu", _SOURCE, extra_cflags=("-fno-trapping-math",))
_lib.add_rms_norm_cpu.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                  ctypes.c_long, ctypes.c_long, ctypes.c_float, ctypes.c_int]
_lib.add_rms_norm_cpu.restype = None


class ModelNew(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        w = self.weight.detach()
        if x.dtype != torch.bfloat16 or residual.dtype != torch.bfloat16 or w.dtype not in (torch.float32, torch.bfloat16):
            raise TypeError(f"add_rms_norm_cpu takes bfloat16 activations, got {x.dtype} and {residual.dtype}")
        x, residual, w = x.contiguous(), residual.contiguous(), w.contiguous()
        out = torch.empty_like(x)
        total = torch.empty_like(x)
        cols = x.shape[-1]
        _lib.add_rms_norm_cpu(x.data_ptr(), residual.data_ptr(), w.data_ptr(), out.data_ptr(), total.data_ptr(),
                              x.numel() // cols if cols else 0, cols, self.eps, w.dtype == torch.bfloat16)
        return out, total
