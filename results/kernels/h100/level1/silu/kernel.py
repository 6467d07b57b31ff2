"""H100 reference kernel for level1/silu (SiLU, x * sigmoid(x), fp32): one streaming pass.

Each thread moves UNROLL 16-byte vectors (float4) per step, spaced BLOCK apart so every warp
access is coalesced, with streaming cache hints (the data is touched once); a scalar path covers
the tail (n % 4) and misaligned views. x / (1 + exp(-x)) with the precise expf: for very negative x, exp(-x) overflows to inf and the quotient is -0, the right limit.
Built with `load_inline`: the kernel and its launcher are plain CUDA (no torch headers, so nvcc
compiles them in seconds); the host wrapper in `cpp_sources` checks the tensor and launches on
PyTorch's current stream.
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

BLOCK = 256  # threads per block
UNROLL = 4  # float4 vectors per thread (independent loads in flight)
TUNABLES = {"BLOCK": [128, 256, 512], "UNROLL": [1, 2, 4, 8]}

CUDA_SRC = f"#define BLOCK {BLOCK}\n#define UNROLL {UNROLL}\n" + r"""
#include <cuda_runtime.h>
#include <stdint.h>

__device__ __forceinline__ float op(float v) {
    return v / (1.0f + expf(-v));  // precise expf; exp(-v) = inf gives -0 / 0 correctly
}

__global__ void __launch_bounds__(BLOCK) silu_vec4(const float4* __restrict__ x, float4* __restrict__ y, long n4) {
    long base = (long)blockIdx.x * BLOCK * UNROLL + threadIdx.x;
    float4 v[UNROLL];
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        long i = base + (long)u * BLOCK;
        if (i < n4) v[u] = __ldcs(x + i);
    }
    #pragma unroll
    for (int u = 0; u < UNROLL; ++u) {
        long i = base + (long)u * BLOCK;
        if (i < n4) {
            float4 r;
            r.x = op(v[u].x); r.y = op(v[u].y); r.z = op(v[u].z); r.w = op(v[u].w);
            __stcs(y + i, r);
        }
    }
}

__global__ void __launch_bounds__(BLOCK) silu_scalar(const float* __restrict__ x, float* __restrict__ y, long begin, long n) {
    for (long i = begin + (long)blockIdx.x * BLOCK + threadIdx.x; i < n; i += (long)gridDim.x * BLOCK) y[i] = op(x[i]);
}

int launch_silu(const float* x, float* y, long n, cudaStream_t stream) {
    if (n == 0) return 0;
    bool aligned = ((uintptr_t)x % 16 == 0) && ((uintptr_t)y % 16 == 0);
    long n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        long per_block = (long)BLOCK * UNROLL;
        silu_vec4<<<(unsigned)((n4 + per_block - 1) / per_block), BLOCK, 0, stream>>>(
            (const float4*)x, (float4*)y, n4);
    }
    long rest = n - 4 * n4;
    if (rest > 0) {
        long blocks = (rest + BLOCK - 1) / BLOCK;
        silu_scalar<<<(unsigned)(blocks < 65535 ? blocks : 65535), BLOCK, 0, stream>>>(x, y, 4 * n4, n);
    }
    return (int)cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <c10/cuda/CUDAStream.h>

int launch_silu(const float* x, float* y, long n, cudaStream_t stream);

torch::Tensor forward(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda(), "silu: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "silu: expected float32, got ", x.scalar_type());
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    int err = launch_silu(xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel(),
                          c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == 0, "silu: kernel launch failed: ", cudaGetErrorString((cudaError_t)err));
    return y;
}
"""

_ext = load_inline(name="silu_h100", cpp_sources=CPP_SRC, cuda_sources=CUDA_SRC, functions=["forward"],
                   extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.forward(x)
