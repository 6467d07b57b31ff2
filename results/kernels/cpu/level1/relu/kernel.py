"""CPU reference kernel for level1/relu: one streaming pass, OpenMP over chunks, AVX via -march=native.

Lean form: an extern "C" C++ source compiled by g++ through agentforge's `load_cpp` (cached, ~0.1 s)
and called through ctypes with raw pointers. `(x < 0) ? 0 : x` keeps NaN as NaN, like torch.relu.
"""

import ctypes

import torch
import torch.nn as nn
from agentforge.evaluator.native import load_cpp

CHUNK = 65536  # elements per OpenMP work item
PAR_MIN = 262144  # below this many elements the call stays on one thread (thread wake-up costs more)
TUNABLES = {"CHUNK": [16384, 65536, 262144], "PAR_MIN": [65536, 262144, 1048576]}

_SOURCE = f"#define CHUNK {CHUNK}L\n#define PAR_MIN {PAR_MIN}L\n" + r"""
extern "C" void relu_f32(const float* __restrict__ x, float* __restrict__ y, long n) {
    long chunks = (n + CHUNK - 1) / CHUNK;
    #pragma omp parallel for schedule(static) if (n >= PAR_MIN)
    for (long c = 0; c < chunks; ++c) {
        long begin = c * CHUNK, end = begin + CHUNK < n ? begin + CHUNK : n;
        #pragma omp simd
        for (long i = begin; i < end; ++i) y[i] = x[i] < 0.f ? 0.f : x[i];
    }
}
"""

_lib = load_cpp("relu_cpu", _SOURCE, extra_cflags=("-fno-trapping-math", "-mprefer-vector-width=512"))
_lib.relu_f32.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_long]
_lib.relu_f32.restype = None


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype != torch.float32:
            raise TypeError(f"relu_cpu takes float32, got {x.dtype}")
        x = x.contiguous()
        y = torch.empty_like(x)
        _lib.relu_f32(x.data_ptr(), y.data_ptr(), x.numel())
        return y
